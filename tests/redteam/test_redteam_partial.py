"""Red team of the partial legality policy (issue 35 item 10): an empty kernel beside PyTorch doing the work must
not pass partial. The policy asks the knockout run (verifier/judge/knockout.py) whether the candidate's kernels produce
part of the output: forward once more with every launch of the candidate's own extension skipped.

Here, on the cpu: the shim (verifier/child/knockout_shim.c) builds and rewrites a real loaded library's launch slots
(toy libraries standing in for the CUDA runtime and driver, PyTorch's library and the candidate's extension; and a
real nvcc-built module against the real CUDA runtime where nvcc is installed), skipping the candidate's launches by
every route (runtime, ``<<<>>>``'s entry point, driver, graph, a function pointer, an entry-point getter) while
PyTorch's library launches as before; how a knockout run's outcome is read (crash, inconclusive, no contribution);
and the policy's decision (a conclusive knockout decides; an inconclusive one falls back to the share rule, saying
so). The real constructs on a GPU (``noop<<<1,1>>>(); return at::matmul(a, b);``, ``c *= 1.0f`` after
``torch::mm``, an honest bias+relu after ``torch::mm``) are tests/gpu/redteam/test_redteam_partial_gpu.py.
"""

import ctypes
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest

from kernelmill.schema import Verdict
from verifier import cheats
from verifier.judge import knockout
from verifier.common.config import VerifyConfig
from verifier.common.contract import ChildReport, TrialReport
from verifier.judge.checks import own_work_ok
from verifier.judge.execution import ChildRun
from verifier.judge.verdict import Work, _legality_outcome
from verifier.child.knockout import ChildKnockout
from verifier.judge.knockout import (CONTRIBUTES, INCONCLUSIVE, NO_CONTRIBUTION, KnockoutResult, _judge_knockout,
                                       shim_library)
from verifier.judge.outputs import Evidence

FAKE_CUDA = r"""
#include <string.h>
static int ran = 0;  /* launches that reached the "runtime" */
int cudaLaunchKernel(void) { ++ran; return 7; }
int __cudaLaunchKernel(void) { ++ran; return 7; }
int cuLaunchKernel(void) { ++ran; return 7; }
int cuGraphLaunch(void) { ++ran; return 7; }
int cuGetProcAddress_v2(const char *s, void **pfn, int v, unsigned long long f, void *st) {
    (void)v; (void)f; (void)st;
    if (strcmp(s, "cuLaunchKernel") == 0) { *pfn = (void *)cuLaunchKernel; return 0; }
    return 500;
}
int fake_ran(void) { return ran; }
"""
DECLS = """
int cudaLaunchKernel(void); int __cudaLaunchKernel(void); int cuLaunchKernel(void); int cuGraphLaunch(void);
int cuGetProcAddress_v2(const char *s, void **pfn, int v, unsigned long long f, void *st);
"""
CANDIDATE = DECLS + r"""
int by_runtime(void) { return cudaLaunchKernel(); }
int by_chevrons(void) { return __cudaLaunchKernel(); }
int by_driver(void) { return cuLaunchKernel(); }
int by_graph(void) { return cuGraphLaunch(); }
int by_pointer(void) { int (*volatile f)(void) = cudaLaunchKernel; return f(); }
int by_getter(void) {
    void *p = 0;
    if (cuGetProcAddress_v2("cuLaunchKernel", &p, 12000, 0, 0) != 0) return -1;
    return ((int (*)(void))p)();
}
"""
TORCH_LIKE = DECLS + "int torch_launch(void) { return cudaLaunchKernel(); }\n"
ROUTES = ["by_runtime", "by_chevrons", "by_driver", "by_graph", "by_pointer", "by_getter"]

CC = shutil.which("cc") or shutil.which("gcc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler")


def _build(d: Path, name: str, src: str, *flags: str) -> Path:
    (d / f"{name}.c").write_text(src)
    out = d / f"lib{name}.so"
    subprocess.run([CC, "-O1", "-shared", "-fPIC", "-o", str(out), str(d / f"{name}.c"), *flags], check=True)
    return out


@needs_cc
@pytest.mark.parametrize("relro", ["lazy", "full"])
def test_shim_skips_every_launch_of_the_candidates_library_and_none_of_pytorchs(tmp_path, relro):
    """Full RELRO (``-z now``) makes the slots read-only after loading: the shim writes them all the same."""
    assert sys.getdlopenflags() & os.RTLD_NOW  # what the shim assumes of how Python loads extensions
    link = ["-Wl,-z,now,-z,relro"] if relro == "full" else []
    # names of this case's own: the loader finds a library a DT_NEEDED names by that name once it is loaded
    cuda = _build(tmp_path, f"fakecuda_{relro}", FAKE_CUDA, "-Wl,-Bsymbolic")
    deps = [f"-L{tmp_path}", f"-lfakecuda_{relro}", f"-Wl,-rpath,{tmp_path}", *link]
    cand_path = _build(tmp_path, f"cand_{relro}", CANDIDATE, *deps)
    other_path = _build(tmp_path, f"torchlike_{relro}", TORCH_LIKE, *deps)
    # RTLD_DEEPBIND: the toys bind to the fake runtime even where torch has put the real one in the global scope
    mode = os.RTLD_NOW | os.RTLD_DEEPBIND
    fake, cand, other = (ctypes.CDLL(str(p), mode=mode) for p in (cuda, cand_path, other_path))
    assert [getattr(cand, r)() for r in ROUTES] == [7] * 6 and fake.fake_ran() == 6  # unpatched: all reach it

    knock = ChildKnockout(str(shim_library(tmp_path / "build")))
    knock.skip_launches_of(str(cand_path))
    assert knock.errors == [] and knock.patched >= 5, (knock.errors, knock.patched)
    assert [getattr(cand, r)() for r in ROUTES] == [0] * 6  # each skipped, reported as a success
    assert fake.fake_ran() == 6  # nothing more reached the runtime
    assert other.torch_launch() == 7 and fake.fake_ran() == 7  # PyTorch's library still launches
    assert knock.skipped() == {"cudaLaunchKernel": 2, "__cudaLaunchKernel": 1, "cuLaunchKernel": 2,
                               "cuGraphLaunch": 1}, knock.skipped()
    knock.write_result(tmp_path)
    shim = knockout.ShimReport.read(tmp_path)
    assert shim.skipped == knock.skipped() and shim.redirected == 1 and shim.libraries == [str(cand_path)]


NVCC_TOY = r"""
#include <cuda_runtime.h>
__global__ void noop(float* y) { if (y) y[0] = 1.f; }
extern "C" int by_chevrons() { noop<<<1, 1>>>(nullptr); return 0; }
extern "C" int by_api() {
    float* p = nullptr; void* args[] = {&p};
    return (int)cudaLaunchKernel((const void*)noop, dim3(1), dim3(1), args, 0, 0);
}
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
def test_shim_skips_launches_of_an_nvcc_built_module_against_the_real_cuda_runtime(tmp_path):
    """The real construct's route: ``<<<>>>`` (CUDA 13: ``__cudaLaunchKernel``; 12: ``cudaLaunchKernel``) and
    ``cudaLaunchKernel`` from a module nvcc built and linked against libcudart, as the verifier builds them."""
    paths = []
    for name in ("patched", "untouched"):
        (tmp_path / f"{name}.cu").write_text(NVCC_TOY)
        paths.append(tmp_path / f"{name}.so")
        subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-o", str(paths[-1]), str(tmp_path / f"{name}.cu"),
                        "-lcudart"], check=True, capture_output=True)
    patched, untouched = ctypes.CDLL(str(paths[0])), ctypes.CDLL(str(paths[1]))
    knock = ChildKnockout(str(shim_library(tmp_path / "build")))
    knock.skip_launches_of(str(paths[0]))
    assert knock.errors == [] and knock.patched >= 2
    assert patched.by_api() == 0 and patched.by_chevrons() == 0
    skipped = knock.skipped()
    assert skipped.get("cudaLaunchKernel", 0) + skipped.get("__cudaLaunchKernel", 0) == 2, skipped
    untouched.by_api()  # another module's launch reaches the runtime (an error without a GPU): not counted
    assert knock.skipped() == skipped


def test_marker_is_read_and_removed_before_the_candidate_runs(tmp_path):
    assert ChildKnockout.from_job_dir(tmp_path) is None  # no marker: not a knockout run
    (tmp_path / knockout.MARKER_FILE).write_text("{not json")
    knock = ChildKnockout.from_job_dir(tmp_path)
    assert knock is not None and not (tmp_path / knockout.MARKER_FILE).exists()
    knock.skip_launches_of("/nonexistent/km_ext.so")  # never raises into the candidate's import
    knock.write_result(tmp_path)
    shim = knockout.ShimReport.read(tmp_path)
    assert shim.errors and "unreadable" in shim.errors[0] and shim.skipped == {}


# ---------------------------------------------------------------------------- reading a knockout run
# _still_correct compares the knockout trial's output with the reference on cuda; there is no GPU here, so these
# tests give its answer (mock) and write real child reports and shim results into a real job directory.


def _knockout_dir(tmp_path: Path, *, own_us: float = 0.0, skipped: dict | None = None, errors=(), trial_error=""):
    rec = TrialReport(index=0, kernel_calls=1, own_kernel_us=own_us, error=trial_error,
                      output_file="" if trial_error else "out_0.pt")
    ChildReport(kind="candidate", trials=[rec]).write(tmp_path)
    (tmp_path / knockout.RESULT_FILE).write_text(json.dumps({
        "libraries": ["/b/km_ext.so"], "patched": 3, "skipped": {"__cudaLaunchKernel": 1} if skipped is None else
        skipped, "redirected": 0, "errors": list(errors)}))
    return tmp_path


OK_RUN = ChildRun(rc=0, timed_out=False, log="")


@pytest.mark.parametrize("case, still_correct, outcome, words", [
    ("empty kernel", True, NO_CONTRIBUTION, "still correct"),
    ("honest kernel", False, CONTRIBUTES, "output is wrong"),
    ("own kernel escaped the knockout", True, INCONCLUSIVE, "still ran"),
    ("nothing skipped", True, INCONCLUSIVE, "intercepted none"),
    ("shim failed", True, INCONCLUSIVE, "did not work"),
    ("forward raised", None, CONTRIBUTES, "forward failed"),
])
def test_knockout_outcome(tmp_path, case, still_correct, outcome, words):
    kw = {"own kernel escaped the knockout": dict(own_us=3.5), "nothing skipped": dict(skipped={}),
          "shim failed": dict(errors=["mprotect failed"]), "forward raised": dict(trial_error="RuntimeError")}
    job_dir = _knockout_dir(tmp_path, **kw.get(case, {}))
    with mock.patch.object(knockout, "_still_correct", return_value=still_correct) as compared:
        got = _judge_knockout(None, job_dir, OK_RUN, None, VerifyConfig())
    assert got.outcome == outcome and words in got.detail, got
    assert compared.called == (still_correct is not None)


def test_a_crash_or_hang_under_knockout_means_the_kernels_matter_unless_the_device_never_started(tmp_path):
    got = _judge_knockout(None, tmp_path, ChildRun(rc=-11, timed_out=False, log="Segmentation fault"), None,
                          VerifyConfig())
    assert got.outcome == CONTRIBUTES and "died" in got.detail
    got = _judge_knockout(None, tmp_path, ChildRun(rc=None, timed_out=True, log=""), None, VerifyConfig())
    assert got.outcome == CONTRIBUTES and "timed out" in got.detail
    log = "[verifier] warm execution process ready\nwarm-up failed: CUDA out of memory\n"
    got = _judge_knockout(None, tmp_path, ChildRun(rc=1, timed_out=False, log=log), None, VerifyConfig())
    assert got.outcome == INCONCLUSIVE


def test_a_knockout_that_cannot_build_its_shim_is_inconclusive(tmp_path):
    with mock.patch.object(knockout, "shim_library", side_effect=knockout.KnockoutError("no C compiler")):
        got = knockout.run_knockout(Work(verdict=Verdict(candidate_id="c")), None, VerifyConfig(), tmp_path,
                                     make_job=None, job_dir_of=None, run_driven=None)
    assert got.outcome == INCONCLUSIVE and "no C compiler" in got.detail


def test_a_knockout_failing_on_the_verifiers_side_says_why_and_is_made_once_more(tmp_path, monkeypatch):
    monkeypatch.setattr(knockout, "KNOCKOUT_RETRY_S", 0.2)  # the pause before the second run
    # the child's reference failed (the verifier's problem): inconclusive, its exception named, marked for a retry
    ChildReport(kind="candidate", reference_error="Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory.").write(
        tmp_path)
    got = _judge_knockout(None, tmp_path, OK_RUN, None, VerifyConfig())
    assert got.outcome == INCONCLUSIVE and got.verifier_failure and "CUDA out of memory" in got.detail, got
    # the reference raising otherwise in the knockout run: it ran in the candidate's process on every trial of the
    # judged run, so it is the candidate's doing (docs/ANTI_CHEAT.md class 48): inconclusive, never the verifier's
    ChildReport(kind="candidate", reference_error="Traceback ...\nRuntimeError: expected m1 and m2 to have the same "
                                                  "dtype, but got: float != double").write(tmp_path)
    got = _judge_knockout(None, tmp_path, OK_RUN, None, VerifyConfig())
    assert got.outcome == INCONCLUSIVE and not got.verifier_failure and "same dtype" in got.detail, got
    # run_knockout makes a second run after such a failure and stops at the first that is not one
    failed = KnockoutResult(INCONCLUSIVE, "the knockout run failed on the verifier's side", verifier_failure=True)
    ok = KnockoutResult(NO_CONTRIBUTION, "still correct", skipped={"__cudaLaunchKernel": 1})
    run = dict(make_job=None, job_dir_of=None, run_driven=None)
    with mock.patch.object(knockout, "shim_library", return_value=tmp_path / "shim.so"), \
            mock.patch.object(knockout, "_knockout_once", side_effect=[failed, ok]) as once:
        t0 = time.monotonic()
        got = knockout.run_knockout(Work(verdict=Verdict(candidate_id="c")), None, VerifyConfig(), tmp_path, **run)
    assert once.call_count == 2 and got.outcome == NO_CONTRIBUTION and got.attempts == 2
    assert time.monotonic() - t0 >= 0.2
    with mock.patch.object(knockout, "shim_library", return_value=tmp_path / "shim.so"), \
            mock.patch.object(knockout, "_knockout_once", side_effect=lambda *a: KnockoutResult(
                INCONCLUSIVE, "failed on the verifier's side", verifier_failure=True)) as once:
        got = knockout.run_knockout(Work(verdict=Verdict(candidate_id="c")), None, VerifyConfig(), tmp_path, **run)
    assert once.call_count == knockout.KNOCKOUT_ATTEMPTS and got.outcome == INCONCLUSIVE
    # a candidate's own outcome is never run again
    with mock.patch.object(knockout, "shim_library", return_value=tmp_path / "shim.so"), \
            mock.patch.object(knockout, "_knockout_once", return_value=HONEST) as once:
        got = knockout.run_knockout(Work(verdict=Verdict(candidate_id="c")), None, VerifyConfig(), tmp_path, **run)
    assert once.call_count == 1 and got.outcome == CONTRIBUTES and got.attempts == 1


# ---------------------------------------------------------------------------- the partial policy's decision


def _report(share_calls: int = 1) -> ChildReport:
    return ChildReport(kind="candidate", own_kernel_ran=True,
                       trials=[TrialReport(index=i, kernel_calls=share_calls) for i in range(5)])


def _verdict(share: float) -> Verdict:
    return Verdict(candidate_id="c", backend="cuda", own_kernel_share=share, correct=True)


NONE_SKIPPED = KnockoutResult(INCONCLUSIVE, "the knockout intercepted none of your launches")
EMPTY = KnockoutResult(NO_CONTRIBUTION, "with every kernel launch of your own module skipped (1 launches), ...",
                       skipped={"__cudaLaunchKernel": 1})
HONEST = KnockoutResult(CONTRIBUTES, "with your kernels skipped the output is wrong: their work is part of it")


@pytest.mark.parametrize("share, knocked, ok", [
    (0.024, EMPTY, False),  # issue 35: an empty kernel at 2.4% of a short forward passed the share rule
    (0.6, EMPTY, False),  # a conclusive knockout decides, whatever the share
    (0.0005, HONEST, True),  # a small but necessary kernel (bias+relu after a long matmul)
    (0.024, NONE_SKIPPED, True),  # inconclusive: the share rule, as before
    (0.0005, NONE_SKIPPED, False),
    (0.024, None, True),  # no knockout (cpu, or no PyTorch compute): the share rule
])
def test_partial_policy_asks_the_knockout_then_the_share(share, knocked, ok):
    got, why = own_work_ok(_report(), VerifyConfig(), _verdict(share), knocked)
    assert got is ok, why
    if knocked is EMPTY:
        assert "do not contribute to the output: with them skipped it is still correct" in why
    assert own_work_ok(_report(share_calls=0), VerifyConfig(), _verdict(share), HONEST)[0] is False  # never ran


def _outcome(legality: str, knocked: KnockoutResult | None, torch_codes=(cheats.C01,), share: float = 0.024):
    w = Work(verdict=_verdict(share))
    ev = Evidence(torch_codes=set(torch_codes), details=["Runtime check: forward ran PyTorch compute ops: aten::mm."])
    calls = []

    def run(keep_scalars: bool = False):  # as the engine's knockout
        calls.append(1)
        if knocked is None:
            raise AssertionError("the knockout ran where the partial policy's answer did not need it")
        return knocked

    return _legality_outcome(w, VerifyConfig(legality=legality), _report(), ev, run), calls


def test_empty_kernel_beside_pytorch_fails_partial_and_says_why():
    v, calls = _outcome("partial", EMPTY)
    assert calls == [1] and v.status == "cheat" and v.cheats == [cheats.C02] and not v.correct
    assert v.pass_partial is False and v.pass_strict is False
    assert "do not contribute to the output" in v.feedback and v.versions["knockout"]["outcome"] == NO_CONTRIBUTION
    v, _ = _outcome("strict", EMPTY)  # recorded under the strict policy too
    assert v.status == "cheat" and cheats.C01 in v.cheats and v.pass_partial is False
    assert "would fail: your own kernels do not contribute" in v.feedback


def test_honest_kernel_beside_pytorch_passes_partial():
    v, _ = _outcome("partial", HONEST, share=0.0005)  # below the share: the knockout decides
    assert v.status == "pass" and v.pass_partial is True and v.pass_strict is False, v.feedback
    assert v.versions["knockout"]["outcome"] == CONTRIBUTES


def test_inconclusive_knockout_falls_back_to_the_share_and_says_so():
    v, _ = _outcome("partial", NONE_SKIPPED)
    assert v.status == "pass" and v.pass_partial is True
    assert "inconclusive" in v.feedback and "share of device time decided" in v.feedback


def test_a_knockout_that_failed_on_the_verifiers_side_is_no_verdict_of_the_partial_policy():
    # an empty kernel beside at::matmul whose knockout child failed to set up twice (seen on one H200 under ten
    # test workers at dbb69df): the share rule passed it; the policy's deciding run never happened, so under the
    # partial policy the verdict is the verifier's error (a retry), and under the strict one the strict answer stands
    failed = KnockoutResult(INCONCLUSIVE, "the knockout run failed on the verifier's side (before your program ran: "
                            "RuntimeError: CUDA error: out of memory)", verifier_failure=True, attempts=2)
    v, calls = _outcome("partial", failed)
    assert calls == [1] and v.status == "verifier_error" and v.pass_partial is None and v.reward == 0.0, v
    assert "failed on the verifier's side in 2 run(s)" in v.feedback and "out of memory" in v.feedback
    v, _ = _outcome("strict", failed)
    assert v.status == "cheat" and cheats.C01 in v.cheats and v.pass_strict is False


def test_no_knockout_without_pytorch_compute():
    """The partial policy's answer needs no knockout where forward ran no PyTorch compute (strict's pass)."""
    v, calls = _outcome("partial", None, torch_codes=())
    assert calls == [] and v.status == "pass" and v.pass_partial is True and "knockout" not in v.versions
