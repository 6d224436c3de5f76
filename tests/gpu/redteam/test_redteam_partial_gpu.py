"""Red team of the partial legality policy on cuda (marker gpu; issue 35 item 10): the policy allows PyTorch compute
beside the candidate's own kernels, which must produce part of the output. The knockout run (verifier/judge/knockout.py)
runs forward once more with every launch of the candidate's own extension skipped; still correct means its kernels
did no part of the work.

- an empty kernel beside ``at::matmul`` (``noop<<<1,1>>>(); return at::matmul(a, b);``): passed partial on its
  time share before the knockout; fails it now;
- ``c *= 1.0f`` in an own kernel after ``torch::mm``: a kernel that runs and writes the output, without changing
  it; fails partial;
- honest: ``torch::mm`` then an own bias+relu kernel: passes partial (the output is wrong without it).

All three are correct and run PyTorch compute in forward, so the strict policy rejects all three (C01). Each batch
runs under the partial policy and again under the strict one (builds shared): both record both answers.
"""

import dataclasses
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import pytest  # noqa: E402

from bench.lib import fixtures as fx  # noqa: E402
from kernelmill.schema import Candidate, Task  # noqa: E402
from verifier import cheats  # noqa: E402
from verifier.engine import VerifyConfig, verify_batch  # noqa: E402
from verifier.judge.knockout import CONTRIBUTES, NO_CONTRIBUTION  # noqa: E402

pytestmark = pytest.mark.gpu

MATMUL_TASK = fx.MATMUL_TASK.replace("torch.randn(64, 96), torch.randn(96, 48)",
                                     "torch.randn(512, 384), torch.randn(384, 256)")
LINEAR_RELU_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, w, b):
        return torch.relu(x @ w + b)


def get_inputs():
    return [torch.randn(512, 384), torch.randn(384, 256), torch.randn(256)]


def get_init_inputs():
    return []
'''

NOOP_BESIDE_MATMUL = r'''
#include <torch/extension.h>
__global__ void noop() {}
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    noop<<<1, 1>>>();
    return at::matmul(a, b);
}
'''
TIMES_ONE_AFTER_MM = r'''
#include <torch/extension.h>
__global__ void scale(float* c, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] *= s;
}
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    auto c = torch::mm(a, b);
    int n = c.numel();
    scale<<<(n + 255) / 256, 256>>>(c.data_ptr<float>(), 1.0f, n);
    return c;
}
'''
HONEST_BIAS_RELU_AFTER_MM = r'''
#include <torch/extension.h>
__global__ void bias_relu(float* c, const float* bias, int n, int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = fmaxf(c[i] + bias[i % cols], 0.f);
}
torch::Tensor mm(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    auto c = torch::mm(x, w);
    int n = c.numel(), cols = c.size(1);
    bias_relu<<<(n + 255) / 256, 256>>>(c.data_ptr<float>(), b.data_ptr<float>(), n, cols);
    return c;
}
'''


def _candidate(src: str, args: str, name: str) -> str:
    sig = ", ".join(f"torch::Tensor {a}" for a in args.split(", "))
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
SRC = r"""{src}"""
ext = load_inline(name="{name}", cpp_sources="torch::Tensor mm({sig});", cuda_sources=SRC, functions=["mm"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {args}):
        return ext.mm({", ".join(a + ".contiguous()" for a in args.split(", "))})
'''


CASES = {  # name: (task, candidate, passes partial, knockout outcome)
    "empty_kernel_beside_at_matmul": (MATMUL_TASK, _candidate(NOOP_BESIDE_MATMUL, "a, b", "ko_noop"), False,
                                      NO_CONTRIBUTION),
    "times_one_kernel_after_torch_mm": (MATMUL_TASK, _candidate(TIMES_ONE_AFTER_MM, "a, b", "ko_times_one"), False,
                                        NO_CONTRIBUTION),
    "honest_bias_relu_kernel_after_torch_mm": (LINEAR_RELU_TASK, _candidate(HONEST_BIAS_RELU_AFTER_MM, "x, w, b",
                                                                            "ko_bias_relu"), True, CONTRIBUTES),
}


@pytest.fixture(scope="module")
def verdicts():
    """{policy: {case: verdict}}: the batch under the partial policy, then under the strict one."""
    base = VerifyConfig(build_dir=tempfile.mkdtemp(prefix="km-redteam-partial-"), timing_trials=5, run_timeout_s=120,
                        time_torch_compile=False)
    tasks = {t: Task.from_code(t, name=f"t{k}", source="seed", level=1)
             for k, t in enumerate(sorted({c[0] for c in CASES.values()}))}
    names = list(CASES)
    items = [(tasks[CASES[n][0]], Candidate(candidate_id=n, task_id=tasks[CASES[n][0]].task_id, backend="cuda",
                                            generator="redteam", code=CASES[n][1])) for n in names]
    out = {}
    for policy in ("partial", "strict"):
        cfg = dataclasses.replace(base, legality=policy)
        out[policy] = dict(zip(names, verify_batch(items, config=cfg, compile_workers=8)))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_partial_policy_asks_whether_own_kernels_produce_part_of_the_output(verdicts, name):
    _, _, passes, outcome = CASES[name]
    v = verdicts["partial"][name]
    knocked = v.versions.get("knockout", {})
    assert v.pass_strict is False and v.pass_partial is passes, (name, v.status, v.cheats, knocked, v.feedback[:1200])
    assert knocked.get("outcome") == outcome, (name, knocked, v.feedback[:1200])
    if passes:
        assert v.status == "pass" and v.correct, (name, v.feedback[:1200])
    else:
        assert v.status == "cheat" and v.cheats == [cheats.C02], (name, v.status, v.cheats)
        assert "do not contribute to the output" in v.feedback, v.feedback[:1200]
        # the shim skipped the candidate's own launches (<<<>>>: __cudaLaunchKernel on CUDA 13, else cudaLaunchKernel)
        assert sum(knocked["skipped"].values()) >= 1 and knocked["own_kernel_us"] == 0, knocked


@pytest.mark.parametrize("name", list(CASES))
def test_strict_policy_rejects_pytorch_compute_and_records_the_partial_answer(verdicts, name):
    _, _, passes, _ = CASES[name]
    v = verdicts["strict"][name]
    assert v.status == "cheat" and cheats.C01 in v.cheats, (name, v.status, v.cheats, v.feedback[:1200])
    assert v.pass_strict is False and v.pass_partial is passes, (name, v.feedback[:1200])
    assert ("would pass." if passes else "would fail: your own kernels do not contribute") in v.feedback
