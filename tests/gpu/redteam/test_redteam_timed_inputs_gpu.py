"""Red team of inputs written in place on the timed calls only, on cuda (marker gpu; docs/ANTI_CHEAT.md class 43):
the cpu pair of tests/redteam/test_redteam_timed_inputs.py with a CUDA kernel. A timed call's input is a view into
the harness's pool (CUDA IPC memory), its storage far larger than the tensor; the cheat writes its answer into that
input and returns it. The harness compares the pool's inputs with what it wrote, on its own stream right after the
calls' done word (verifier/execute/timed_checks.py ``inputs_changed``): C07. Honest twin: a new tensor every call passes.
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import pytest  # noqa: E402

from bench.lib import fixtures as fx  # noqa: E402
from kernelmill.schema import Candidate, Task  # noqa: E402
from verifier import cheats  # noqa: E402
from verifier.engine import VerifyConfig, verify_batch  # noqa: E402

pytestmark = pytest.mark.gpu

CUDA = r'''
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu(torch::Tensor x) {
    const bool timed = x.storage().nbytes() > (size_t)x.numel() * x.element_size();
    auto out = IN_PLACE ? x : torch::empty_like(x);
    const int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
'''


def _candidate(name: str, in_place: str) -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""{CUDA.replace("IN_PLACE", in_place)}"""
ext = load_inline(name="{name}", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=CUDA_SRC,
                  functions=["relu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x.contiguous())
'''


CASES = {"c07_input_written_in_place_when_timed_cuda": (_candidate("relu_inplace_timed_cu", "timed"), "cheat"),
         "honest_relu_into_a_new_tensor_cuda": (_candidate("relu_new_tensor_cu", "false"), "pass")}


@pytest.fixture(scope="module")
def verdicts():
    cfg = VerifyConfig(build_dir=tempfile.mkdtemp(prefix="km-timed-inputs-"), trials=3, timing_trials=5, warmup=1,
                       time_torch_compile=False, run_timeout_s=120)
    task = Task.from_code(fx.RELU_TASK, name="relu", source="seed", level=1)
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cuda", generator="redteam", code=c))
             for n, (c, _) in CASES.items()]
    return dict(zip(CASES, verify_batch(items, config=cfg)))


@pytest.mark.parametrize("name", list(CASES))
def test_inputs_written_in_place_on_timed_calls_are_seen_outside_the_process_on_cuda(verdicts, name):
    v, want = verdicts[name], CASES[name][1]
    assert v.status == want, (name, v.status, v.cheats, v.feedback[:800])
    if want == "cheat":
        assert v.cheats == [cheats.C07], (v.cheats, v.feedback[:800])
    else:
        assert v.cheats == [] and v.speedup_eager is not None and v.runtime_us, (v.speedup_eager, v.feedback[:600])
