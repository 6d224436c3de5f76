"""Red team of the static scan's reading of what computes (C01, strict's C19): an honest candidate rejected.

A candidate that sized its own C++ thread pool with ``WORKERS = torch.get_num_threads()`` at module level and ran its
own threaded relu got ``cheat`` with C19_UNRUN_TORCH_PATH under the strict policy: the scan classed
``torch.get_num_threads`` as PyTorch compute (it was not on the allocation/view allowlist), and the finding was dropped
only for code that construction alone runs (``__init__``), not for code that runs once at import. No monitor saw
PyTorch compute in forward, so strict read it as PyTorch on a path that never ran.

Closed at the root, for the class:

- torch calls that ask what the process, the build or a tensor's metadata is and compute nothing
  (``get_num_threads``, ``get_num_interop_threads``, ``torch.backends.<x>.is_available``, ``jit.is_scripting``,
  ``compiler.is_compiling``...: static_rules ``TORCH_QUERIES`` / ``BACKEND_QUERIES``) are no compute anywhere,
  forward included;
- PyTorch compute that only the import runs (a module-level table, a class attribute) is set-up, as construction's
  is: legality is about what forward computes (static_program ``Program.add``, static_scope ``import_time_nodes``).

Not opened: module-level code forward reaches (a helper function, a lambda bound at module level, a generator's lazy
body forward consumes) is still forward's code, and code built at import or construction for forward to run
(``torch.compile``, ``torch.jit.script``, by name or through ``getattr``) is still C01 wherever it is built. Seeding
at import stays as it was (no C12). Static cases for each; end to end on the cpu backend for the honest candidate.
"""

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch
from verifier.front.static import scan

OWN = "return ext.relu(x.contiguous())"
# honest: a query of the process or the build, in forward or at import, and PyTorch compute only the import runs
HONEST = {
    "thread_pool_sized_at_import": fx.cpu_candidate(OWN, module="WORKERS = max(1, torch.get_num_threads())\n"),
    "thread_counts_read_in_forward": fx.cpu_candidate(
        "n = torch.get_num_threads() + torch.get_num_interop_threads()\n" + OWN),
    "backend_availability_in_forward": fx.cpu_candidate(
        "fast = torch.backends.mkldnn.is_available() and torch.backends.openmp.is_available()\n"
        "cudnn = torch.backends.cudnn.is_available() and torch.cuda.is_available()\n" + OWN),
    "tracing_and_compiling_queries_in_forward": fx.cpu_candidate(
        "if torch.jit.is_scripting() or torch.compiler.is_compiling():\n    raise RuntimeError('eager only')\n" + OWN),
    "metadata_queries_in_forward": fx.cpu_candidate(
        "assert torch.is_tensor(x) and torch.is_floating_point(x) and x.dtype == torch.get_default_dtype()\n"
        "assert not torch.is_conj(x) and not torch.is_neg(x) and torch.is_same_size(x, x)\n" + OWN),
    "table_computed_at_import": fx.cpu_candidate(OWN, module="TABLE = torch.arange(16).float().exp()\n"),
    "matmul_at_import": fx.cpu_candidate(OWN, module="_A = torch.ones(4, 4)\nPROJ = _A @ _A.t()\n"),
    "class_attribute_computed_at_import": fx.cpu_candidate(
        OWN, module="class Tables:\n    SCALE = torch.linspace(0, 1, 8).sqrt()\n"),
    "backend_query_at_import": fx.cpu_candidate(OWN, module="USE_CUDNN = torch.backends.cudnn.is_available()\n"),
}


@pytest.mark.parametrize("name", list(HONEST))
def test_queries_and_compute_only_the_import_runs_are_not_pytorch_compute(name):
    report = scan(HONEST[name], "cpu")
    assert not [f for f in report.findings if f.code in (cheats.C01, cheats.C19)], [str(f) for f in report.findings]


# (forward reaches it, its import-time twin): the same PyTorch compute, once where forward runs it, once at import
REACHED = {
    "module_level_helper": ("def _h(x):\n    return torch.relu(x)\n", "return _h(x)",
                            "_T = torch.relu(torch.arange(-4, 4).float())\n"),
    "lambda_bound_at_module_level": ("_h = lambda x: torch.relu(x)\n", "return _h(x)",
                                     "_T = (lambda v: v)(torch.relu(torch.arange(-4, 4).float()))\n"),
    # a generator's body runs as it is consumed: from forward here, though the expression is written at module level
    "generator_consumed_in_forward": ("_IN = []\n_GEN = (torch.relu(_IN[-1]) for _ in iter(int, 1))\n",
                                      "_IN.append(x)\nreturn next(_GEN)",
                                      "_T = [torch.relu(v) for v in torch.arange(-4, 4).float().split(2)]\n"),
}


@pytest.mark.parametrize("name", list(REACHED))
def test_module_level_code_forward_reaches_is_still_forwards_compute(name):
    module, forward, import_twin = REACHED[name]
    report = scan(fx.cpu_candidate(forward, module=module), "cpu")
    assert any(f.code == cheats.C01 and f.torch and "torch.relu" in f.what for f in report.findings), \
        [str(f) for f in report.findings]
    twin = scan(fx.cpu_candidate(OWN, module=import_twin), "cpu")
    assert not [f for f in twin.findings if f.code == cheats.C01], [str(f) for f in twin.findings]


def test_code_built_for_forward_at_import_or_construction_is_still_c01():
    """torch.compile / torch.jit.script build what forward then runs: not set-up, wherever they are called."""
    built = {
        "compiled_at_import": fx.cpu_candidate("return FAST(x)", module="FAST = torch.compile(torch.relu)\n"),
        "compiled_by_name_at_import": fx.cpu_candidate(
            "return FAST(x)", module="FAST = getattr(torch, 'compile')(torch.relu)\n"),
        "scripted_at_construction": fx.cpu_candidate(
            "return self.body(x)", init="self.body = torch.jit.script(nn.Sequential(nn.ReLU()))"),
    }
    for name, code in built.items():
        report = scan(code, "cpu")
        # a finding of its own (not "PyTorch compute", which only strict rejects): both policies reject it
        assert any(f.code == cheats.C01 and not f.torch for f in report.findings), (name, [str(f) for f in
                                                                                          report.findings])


def test_seeding_at_import_is_judged_as_before_and_in_forward_is_c12():
    at_import = scan(fx.cpu_candidate(OWN, module="torch.manual_seed(0)\nWORKERS = torch.get_num_threads()\n"))
    assert at_import.findings == [], [str(f) for f in at_import.findings]
    in_forward = scan(fx.cpu_candidate("torch.manual_seed(0)\nn = torch.get_num_threads()\n" + OWN))
    assert [f.code for f in in_forward.findings] == [cheats.C12], [str(f) for f in in_forward.findings]


# ---- end to end: the honest candidate as it was rejected (its own threaded relu, the pool sized at import), with a
# table computed at import beside it. An extension of its own: the shared fixture extension's `relu_aten` imports
# at::relu, which the binary scan reads as PyTorch compute reachable from forward (strict's C19 by itself)
THREADED_RELU = r"""
#include <torch/extension.h>
#include <thread>
#include <vector>
torch::Tensor relu(torch::Tensor x, int64_t workers) {
    x = x.contiguous();
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>(); float* o = out.data_ptr<float>();
    const int64_t n = x.numel(), chunk = (n + workers - 1) / workers;
    std::vector<std::thread> pool;
    for (int64_t w = 0; w < workers; ++w)
        pool.emplace_back([=] {
            for (int64_t i = w * chunk; i < std::min(n, (w + 1) * chunk); ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
        });
    for (auto& t : pool) t.join();
    return out;
}
"""
HONEST_E2E = f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{THREADED_RELU}"""
ext = load_inline(name="relu_mt", cpp_sources=CPP, functions=["relu"], extra_cflags=["-O2"])
WORKERS = max(1, torch.get_num_threads())
TABLE = torch.arange(16).float()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu(x, WORKERS)
'''


@pytest.fixture(scope="module")
def verdict(shared_build_dir):
    task = Task.from_code(fx.RELU_TASK, name="front_queries", source="seed", level=1)
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=5, timing_trials=0, warmup=1, time_torch_compile=False,
                       run_timeout_s=60, memory_limit_gb=4, exec_workers=1, legality="strict")
    item = (task, Candidate(candidate_id="threads_sized_at_import", task_id=task.task_id, backend="cpu",
                            generator="redteam", code=HONEST_E2E))
    return verify_batch([item], config=cfg, compile_workers=1)[0]


def test_an_honest_candidate_that_queries_torch_at_import_passes_strict(verdict):
    assert verdict.status == "pass" and verdict.cheats == [], (verdict.cheats, verdict.feedback[:800])
    assert verdict.pass_strict is True and verdict.pass_partial is True
