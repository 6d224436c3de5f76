"""Red team of the extensions a candidate's process builds at run time (docs/ANTI_CHEAT.md class 39).

``load_inline`` arguments the static stage cannot read (a source made at run time) used to be compiled inside the
execution child, and the verifier scanned those builds afterwards. Two routes got through:
- the child listed its builds in a file of its job directory, which the candidate can write: a first extension
  emptied the list once a second one, built in the child, was loaded, and that one called ``at::cpu::mm`` below the
  dispatcher;
- once the builds were streamed over the channel, an extension built in the child hid ``at::cpu::mm`` behind an
  ``__asm__`` label (no name in its source) and removed its own binary before the verifier read it.

Closed at the root: the candidate's process never compiles. It sends the spec over the job's channel; the verifier
builds it in its own build root (read-only to the sandboxed child) and scans the sources and the binary it built
before the child may load it (verifier/build/runtime.py); the findings live in the verifier's ledger
(verifier/judge/checks.py ``check_child_built``), the binary sealed as built. ATen compute such a binary imports is
PyTorch compute in forward, as for the compile pool's builds. Honest twin: an honest kernel built at run time passes.
"""

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch
from verifier.build.runtime import spec_from_request
from verifier.common.contract import ChildBuild
from verifier.execute.channel import Ledger
from verifier.judge.checks import check_child_built, check_sandbox_escape
from verifier.judge.outputs import Evidence

BELOW_THE_DISPATCHER = r'''
#include <ATen/ATen.h>
#include <ATen/ops/mm_cpu_dispatch.h>
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    return at::cpu::mm(a.contiguous(), b.contiguous());
}
'''
# at::cpu::mm by its mangled name behind an asm label (nothing in the source names it), and the binary removed once
# loaded: the path comes from Python (the module's __file__), so no dynamic-loading call is in the binary either
HIDDEN_AND_REMOVED = r'''
#include <torch/extension.h>
#include <unistd.h>
#include <string>
at::Tensor km_fast_mm(const at::Tensor& a, const at::Tensor& b) __asm__("_ZN2at3cpu2mmERKNS_6TensorES3_");
void finish_setup(std::string self) { unlink(self.c_str()); }  // "clean the runtime-specialised build"
torch::Tensor mm(torch::Tensor a, torch::Tensor b) { return km_fast_mm(a.contiguous(), b.contiguous()); }
'''
# ATen's matmul through the dispatcher, on a thread of the extension's own (no monitor of the candidate's process
# watches it)
ATEN_ON_A_THREAD = r'''
#include <torch/extension.h>
#include <thread>
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    torch::Tensor out;
    std::thread t([&] { out = at::mm(a, b); });
    t.join();
    return out;
}
'''
HONEST = ("#include <torch/extension.h>\n" + fx.NAIVE_MM_CPP +
          "torch::Tensor mm(torch::Tensor a, torch::Tensor b) { return naive_mm(a, b); }\n")
SCRUB = r'''
#include <torch/extension.h>
#include <cstdio>
void finish_setup() {  // "reset the build manifest once the runtime-specialised kernels are loaded"
    FILE* f = std::fopen("child_built.json", "w");
    if (f) { std::fputs("[]", f); std::fclose(f); }
}
'''


def _candidate(kernel: str, scrub: bool = False, remove: bool = False) -> str:
    setup = (f'SETUP = r"""{SCRUB}"""\nsetup = load_inline(name="cb_setup", cpp_sources=SETUP, '
             'functions=["finish_setup"], extra_cflags=["-O2"])\n' if scrub else "")
    fns = '["mm", "finish_setup"]' if remove else '["mm"]'
    after = "setup.finish_setup()" if scrub else "kern.finish_setup(kern.__file__)" if remove else ""
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

{setup}KERNEL = r"""{kernel}"""
TAG = hash(KERNEL) % 7  # a per-process build tag: the source is made at run time, so it is built at run time
kern = load_inline(name="cb_kern", cpp_sources=[KERNEL + f"\\n// tag={{TAG}}\\n"], functions={fns}, extra_cflags=["-O2"])
{after}


class ModelNew(nn.Module):
    def forward(self, a, b):
        return kern.mm(a, b)
'''


CASES = {"below_the_dispatcher_built_in_the_child_list_emptied": (_candidate(BELOW_THE_DISPATCHER, scrub=True), "cheat"),
         "asm_label_below_the_dispatcher_binary_removed": (_candidate(HIDDEN_AND_REMOVED, remove=True), "cheat"),
         "aten_on_a_thread_built_at_run_time": (_candidate(ATEN_ON_A_THREAD), "cheat"),
         "honest_kernel_built_in_the_child": (_candidate(HONEST), "pass")}


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    task = Task.from_code(fx.MATMUL_TASK, name="childbuilt", source="seed", level=1)
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=3, timing_trials=0, warmup=1, time_torch_compile=False,
                       run_timeout_s=240, memory_limit_gb=4, exec_workers=1, allow_child_compile=True)
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cpu", generator="redteam", code=c))
             for n, (c, _) in CASES.items()]
    return dict(zip(CASES, verify_batch(items, config=cfg, compile_workers=1)))


@pytest.mark.parametrize("name", list(CASES))
def test_builds_at_run_time_are_the_verifiers(verdicts, name):
    v, want = verdicts[name], CASES[name][1]
    assert v.status == want, (name, v.status, v.cheats, v.feedback[:800])
    if name == "aten_on_a_thread_built_at_run_time":  # PyTorch compute in forward (strict: C01 seen, C19 unseen)
        assert {cheats.C01, cheats.C19} & set(v.cheats), v.cheats
        assert "aten::mm" in v.feedback and "Binary check" in v.feedback, v.feedback[:800]
    elif want == "cheat":
        assert cheats.C01 in v.cheats, v.cheats
        assert "Check of the extension built at run time" in v.feedback and "at::cpu::mm" in v.feedback or \
            "_ZN2at3cpu2mm" in v.feedback, v.feedback[:800]
    else:
        assert v.cheats == [], v.cheats


def test_the_judge_reads_what_the_verifier_built_and_sealed(tmp_path):
    so = tmp_path / "ext.so"
    so.write_bytes(b"built")
    from verifier.common.contract import file_seal
    ledger, ev = Ledger(), Evidence()
    ledger.child_builds = [
        ChildBuild(n=0, ok=True, so_path=str(so), sha256=file_seal(so), compute=["aten::mm"]),
        ChildBuild(n=1, error="not built", vendor=["the built extension calls ATen's kernels below the dispatcher: "
                                                    "at::mm"], tamper=["the C++ reaches Python objects"]),
    ]
    assert check_child_built(ledger, ev) == ["aten::mm"]  # the compute goes to the legality policy
    assert ev.codes == {cheats.C01, cheats.C11}, (ev.codes, ev.details)
    so.write_bytes(b"replaced")  # the binary no longer what the verifier built and scanned
    ev = Evidence()
    check_child_built(ledger, ev)
    assert cheats.C11 in ev.codes and any("removed or replaced" in d for d in ev.details), ev.details
    so.unlink()
    ev = Evidence()
    check_child_built(Ledger(child_builds=[ChildBuild(n=0, ok=True, so_path=str(so), sha256="ab")]), ev)
    assert ev.codes == {cheats.C11}
    ev = Evidence()
    assert check_child_built(Ledger(), ev) == [] and ev.codes == set() and ev.details == []
    ev = Evidence()
    check_sandbox_escape(tmp_path, ev, [ChildBuild(n=0, escapes=["a write outside the build"])])
    assert ev.codes == {cheats.C17} and "while building the extension asked for at run time" in ev.details[0]


def test_a_build_request_is_checked_before_anything_is_built():
    assert spec_from_request({"cpp_sources": ["int f();"], "functions": ["f"]})["cpp_sources"] == ["int f();"]
    for bad in (None, "src", {"cpp_sources": [1]}, {"functions": {"f": 2}}, {"with_cuda": "yes"},
                {"extra_ldflags": [["-lfoo"]]}):
        with pytest.raises(ValueError):
            spec_from_request(bad)


def test_a_kernel_called_below_the_dispatcher_shows_in_the_source():
    """``at::cpu::mm`` / ``at::cuda::_softmax`` name an operator's kernel below the dispatcher (C01 by the source scan,
    before any build); the device helpers of the same namespaces are no operators and pass."""
    from verifier.front.vendor import scan_sources

    assert scan_sources(["auto c = at::cpu::mm(a, b);"]) and scan_sources(["y = at::cuda::_softmax(x, 1, false);"])
    honest = ("auto s = at::cuda::getCurrentCUDAStream(); at::cuda::OptionalCUDAGuard g(x.device());\n"
              "at::cuda::CUDAGuard h(0); auto gen = at::cuda::detail::getDefaultCUDAGenerator();")
    assert scan_sources([honest]) == []
