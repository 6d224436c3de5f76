"""Red team of the extensions a candidate builds inside its own process (docs/ANTI_CHEAT.md class 39).

``load_inline`` arguments the static stage cannot read (a source built at run time) are compiled in the execution
child (``allow_child_compile``), and the verifier scans those builds afterwards as it scans the compile pool's. The
child listed them in a file of its job directory, which the candidate can write: a first extension (built by the
pool, scanned, clean: it only writes a file) emptied the list once a second one, built in the child from a source
made at run time, was loaded, and that second one called ``at::cpu::mm`` below the dispatcher. No scan saw it.

Closed at the root: the child streams each build over the job's channel (verifier/child/loading.py), its sources
and flags before the build and its binary's path after, and the verifier scans what it kept as first sent
(verifier/judge/checks.py ``check_child_built``, from the ``Ledger``). Honest twin: an honest kernel built in the
child from a source made at run time passes.
"""

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch
from verifier.execute.channel import Ledger
from verifier.judge.checks import check_child_built
from verifier.judge.outputs import Evidence

BELOW_THE_DISPATCHER = r'''
#include <ATen/ATen.h>
#include <ATen/ops/mm_cpu_dispatch.h>
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    return at::cpu::mm(a.contiguous(), b.contiguous());
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


def _candidate(kernel: str, scrub: bool) -> str:
    setup = (f'SETUP = r"""{SCRUB}"""\nsetup = load_inline(name="cb_setup", cpp_sources=SETUP, '
             'functions=["finish_setup"], extra_cflags=["-O2"])\n' if scrub else "")
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

{setup}KERNEL = r"""{kernel}"""
TAG = hash(KERNEL) % 7  # a per-process build tag: the source is made at run time, so it is built in the child
kern = load_inline(name="cb_kern", cpp_sources=[KERNEL + f"\\n// tag={{TAG}}\\n"], functions=["mm"], extra_cflags=["-O2"])
{"setup.finish_setup()" if scrub else ""}


class ModelNew(nn.Module):
    def forward(self, a, b):
        return kern.mm(a, b)
'''


CASES = {"below_the_dispatcher_built_in_the_child_list_emptied": (_candidate(BELOW_THE_DISPATCHER, True), "cheat"),
         "honest_kernel_built_in_the_child": (_candidate(HONEST, False), "pass")}


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    task = Task.from_code(fx.MATMUL_TASK, name="childbuilt", source="seed", level=1)
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=3, timing_trials=0, warmup=1, time_torch_compile=False,
                       run_timeout_s=240, memory_limit_gb=4, exec_workers=1, allow_child_compile=True)
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cpu", generator="redteam", code=c))
             for n, (c, _) in CASES.items()]
    return dict(zip(CASES, verify_batch(items, config=cfg, compile_workers=1)))


@pytest.mark.parametrize("name", list(CASES))
def test_builds_in_the_child_are_scanned_as_streamed(verdicts, name):
    v, want = verdicts[name], CASES[name][1]
    assert v.status == want, (name, v.status, v.cheats, v.feedback[:800])
    if want == "cheat":
        assert cheats.C01 in v.cheats, v.cheats
        assert "Check of the extension built at run time" in v.feedback and "_ZN2at3cpu2mm" in v.feedback, v.feedback[:800]
    else:
        assert v.cheats == [], v.cheats


def test_the_scan_reads_the_builds_the_channel_kept_in_order():
    ledger, ev = Ledger(), Evidence()
    ledger.records["child_build0"] = {"sources": [HONEST], "ldflags": []}
    ledger.records["child_built0"] = {"so_path": ""}
    # built, its binary never reported (or replaced by then): the sources, sent before the build, decide
    ledger.records["child_build1"] = {"sources": [BELOW_THE_DISPATCHER], "ldflags": []}
    check_child_built(ledger, ev)
    assert ev.codes == {cheats.C01} and "below the dispatcher (at::cpu::mm)" in ev.details[0], (ev.codes, ev.details)
    ev = Evidence()
    check_child_built(Ledger(), ev)
    assert ev.codes == set() and ev.details == []


def test_a_kernel_called_below_the_dispatcher_shows_in_the_source():
    """``at::cpu::mm`` / ``at::cuda::_softmax`` name an operator's kernel below the dispatcher (C01 by the source scan,
    before any build); the device helpers of the same namespaces are no operators and pass."""
    from verifier.front.vendor import scan_sources

    assert scan_sources(["auto c = at::cpu::mm(a, b);"]) and scan_sources(["y = at::cuda::_softmax(x, 1, false);"])
    honest = ("auto s = at::cuda::getCurrentCUDAStream(); at::cuda::OptionalCUDAGuard g(x.device());\n"
              "at::cuda::CUDAGuard h(0); auto gen = at::cuda::detail::getDefaultCUDAGenerator();")
    assert scan_sources([honest]) == []
