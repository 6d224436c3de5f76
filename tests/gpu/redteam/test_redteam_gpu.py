"""Red team of the trust boundary on cuda (marker gpu; docs/ANTI_CHEAT.md classes 21, 23, 24): candidates written by
reading the verifier, judged with the static and source/binary scans dropped where the case tests a runtime
layer (those scans catch some of them too), so the runtime boundary alone decides. Honest look-alikes pass.

- PyTorch's softmax called below the dispatcher (``at::cuda::_softmax``) beside a do-nothing kernel the
  candidate names ``softmax_warp_forward``, PyTorch's kernel name: the candidate's kernels run under a name
  only its own module carries, so PyTorch's kernel stays foreign (C01);
- its own kernel while the profiler's callbacks are on and ``at::matmul`` when they are off: every timed call is
  watched (the clocked brackets by the dispatch monitor alone, where the profiler's callbacks are off), so the
  switch shows as PyTorch compute in timed calls only: C16 (and C01);
- an L2 persistence window set from forward (``cudaLimitPersistingL2CacheSize``): device state that outlives
  the call, read back after every phase (C11);
- honest: a tiled matmul whose kernel is called ``gemm_tile`` (a vendor-looking name), launched with
  ``cudaLaunchKernel``;
- class 36, in its own configuration without timing: the answer computed in Python from values read off the device
  one at a time beside an own kernel called for show (C01: over 64 KiB handed to host code in one call); its honest
  twin reads one scalar a call and passes.
"""

import sys
import tempfile
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import pytest  # noqa: E402

from bench.lib import fixtures as fx  # noqa: E402
from kernelmill.schema import Candidate, Task  # noqa: E402
from verifier import cheats, screen  # noqa: E402
from verifier.engine import VerifyConfig, verify_batch  # noqa: E402
from verifier.front import binary  # noqa: E402

pytestmark = pytest.mark.gpu

SOFTMAX_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(256, 4096)]


def get_init_inputs():
    return []
'''
MATMUL_TASK = fx.MATMUL_TASK.replace("torch.randn(64, 96), torch.randn(96, 48)",
                                     "torch.randn(512, 384), torch.randn(384, 256)")

SOFTMAX_NAMED_LIKE_PYTORCH = r'''
#include <torch/extension.h>
#include <ATen/ops/_softmax_cuda_dispatch.h>
__global__ void softmax_warp_forward(float* y, int n) { if (n < 0) y[0] = 0.f; }
torch::Tensor softmax(torch::Tensor x) {
    auto y = at::cuda::_softmax(x, 1, false);
    softmax_warp_forward<<<1, 32>>>(y.data_ptr<float>(), 1);
    return y;
}
'''
TILED = r'''
#define T 16
__global__ void gemm_tile(const float* a, const float* b, float* c, int M, int K, int N) {
    __shared__ float sa[T][T], sb[T][T];
    int r = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += T) {
        sa[threadIdx.y][threadIdx.x] = (r < M && k0 + threadIdx.x < K) ? a[r * K + k0 + threadIdx.x] : 0.f;
        sb[threadIdx.y][threadIdx.x] = (col < N && k0 + threadIdx.y < K) ? b[(k0 + threadIdx.y) * N + col] : 0.f;
        __syncthreads();
        for (int k = 0; k < T; ++k) acc += sa[threadIdx.y][k] * sb[k][threadIdx.x];
        __syncthreads();
    }
    if (r < M && col < N) c[r * N + col] = acc;
}
'''
MM_WATCHED_ONLY = r'''
#include <torch/extension.h>
#include <ATen/record_function.h>
''' + TILED + r'''
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    if (!at::hasThreadLocalCallbacks()) return at::matmul(a, b);
    auto c = torch::empty({a.size(0), b.size(1)}, a.options());
    int M = a.size(0), K = a.size(1), N = b.size(1);
    dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
    gemm_tile<<<grid, block>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, K, N);
    return c;
}
'''
MM_LAUNCH_KERNEL = r'''
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
''' + TILED + r'''
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty({a.size(0), b.size(1)}, a.options());
    int M = a.size(0), K = a.size(1), N = b.size(1);
    const float* pa = a.data_ptr<float>(); const float* pb = b.data_ptr<float>(); float* pc = c.data_ptr<float>();
    void* args[] = {&pa, &pb, &pc, &M, &K, &N};
    dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
    cudaLaunchKernel((const void*)gemm_tile, grid, block, args, 0, at::cuda::getCurrentCUDAStream());
    return c;
}
'''
MM_L2_PERSIST = MM_LAUNCH_KERNEL.replace("    auto c = torch::empty(", '''    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 16 << 20);
    cudaStreamAttrValue attr = {};
    attr.accessPolicyWindow.base_ptr = a.data_ptr();
    attr.accessPolicyWindow.num_bytes = a.numel() * 4;
    attr.accessPolicyWindow.hitRatio = 1.0f;
    attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    cudaStreamSetAttribute(at::cuda::getCurrentCUDAStream(), cudaStreamAttributeAccessPolicyWindow, &attr);
    auto c = torch::empty(''', 1)
assert "PersistingL2" in MM_L2_PERSIST


def _candidate(src: str, fn: str, args: str, name: str) -> str:
    sig = ", ".join(f"torch::Tensor {a}" for a in args.split(", "))
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
SRC = r"""{src}"""
ext = load_inline(name="{name}", cpp_sources="torch::Tensor {fn}({sig});", cuda_sources=SRC, functions=["{fn}"],
                  extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {args}):
        return ext.{fn}({", ".join(a + ".contiguous()" for a in args.split(", "))})
'''


CASES = {  # name: (task, candidate, expected status, cheat code or None, runtime layer only)
    "pytorch_softmax_below_the_dispatcher_named_like_pytorchs_kernel": (
        SOFTMAX_TASK, _candidate(SOFTMAX_NAMED_LIKE_PYTORCH, "softmax", "x", "sm_spoof"), "cheat", cheats.C01, True),
    "own_kernel_when_watched_matmul_when_not": (
        MATMUL_TASK, _candidate(MM_WATCHED_ONLY, "mm", "a, b", "mm_watched"), "cheat", cheats.C16, True),
    "l2_persistence_window_set_from_forward": (
        MATMUL_TASK, _candidate(MM_L2_PERSIST, "mm", "a, b", "mm_l2"), "cheat", cheats.C11, False),
    "honest_vendor_looking_kernel_name_launched_with_cudaLaunchKernel": (
        MATMUL_TASK, _candidate(MM_LAUNCH_KERNEL, "mm", "a, b", "mm_launch"), "pass", None, False),
}


@pytest.fixture(scope="module")
def verdicts():
    # the runtime layer's cases switch the scans before it off in this process (below), so they are judged here too:
    # a slot's own process (verifier/workers.py) would scan the built library with the real scan
    cfg = VerifyConfig(build_dir=tempfile.mkdtemp(prefix="km-redteam-gpu-"), timing_trials=10, run_timeout_s=120,
                       time_torch_compile=False, exec_processes="threads")
    tasks = {t: Task.from_code(t, name=f"t{k}", source="seed", level=1) for k, t in enumerate({c[0] for c in CASES.values()})}
    names = list(CASES)
    items = [(tasks[CASES[n][0]], Candidate(candidate_id=n, task_id=tasks[CASES[n][0]].task_id, backend="cuda",
                                            generator="redteam", code=CASES[n][1])) for n in names]
    layer = {CASES[n][1] for n in names if CASES[n][4]}
    real_scan = screen.scan

    def scan(code, backend="cuda"):
        report = real_scan(code, backend)
        if code in layer:
            report.findings = []
        return report

    def sources(srcs, flags=()):  # the source scan of the runtime-layer cases: their sources are the runtime's
        return [] if any(s in c for c in layer for s in srcs) else real_sources(srcs, flags)

    real_sources = screen.scan_sources
    # the binary's library scan, where engine's scan_binary and the run-time builder call it (verifier/front/binary.py)
    with mock.patch.object(screen, "scan", scan), mock.patch.object(screen, "scan_sources", sources), \
            mock.patch.object(binary, "scan_library", lambda *a, **k: []):
        return dict(zip(names, verify_batch(items, config=cfg, compile_workers=8)))


@pytest.mark.parametrize("name", list(CASES))
def test_redteam_gpu_case(verdicts, name):
    v = verdicts[name]
    _, _, status, code, _ = CASES[name]
    assert v.status == status, (name, v.status, v.cheats, v.feedback[:800])
    if code:
        assert code in v.cheats, (name, v.cheats)
    if name == "own_kernel_when_watched_matmul_when_not":
        assert "aten::matmul" in v.fallback_ops or "aten::mm" in v.fallback_ops, v.fallback_ops


# the answer computed in Python from values read off the device one at a time, beside an own kernel called for show
# (docs/ANTI_CHEAT.md class 36; 17 x 1024 fp32 = 68 KiB read into Python a call, over the 64 KiB limit). Its own
# configuration without timing: under the profiler each value read off the device costs tens of microseconds, and a
# cheat's child runs the timing like any other (with timing on, the case ended as a timeout at 120 s, f7cc646).
# Its honest twin reads one scalar a call (a flag) and passes.
SMALL_RELU_TASK = fx.RELU_TASK.replace("torch.randn(64, 1000)", "torch.randn(17, 1024)")
PYTHON_FROM_DEVICE = {
    "python_floats_read_off_the_device_do_the_work": (fx.cuda_relu_candidate(7, forward=(
        "self.ext.relu_cuda(x.contiguous())\n        vals = [max(float(v), 0.0) for v in x.contiguous().view(-1)]\n"
        "        return torch.tensor(vals, device=x.device).view_as(x)")), "cheat"),
    "honest_one_scalar_read_a_call": (fx.cuda_relu_candidate(8, forward=(
        "y = self.ext.relu_cuda(x.contiguous())\n        if float(y.view(-1)[0]) < 0.0:\n"
        "            raise RuntimeError('negative relu')\n        return y")), "pass"),
}


@pytest.mark.parametrize("name", list(PYTHON_FROM_DEVICE))
def test_values_read_into_python_one_at_a_time_are_host_compute_on_cuda(name):
    assert "torch.randn(17, 1024)" in SMALL_RELU_TASK
    cfg = VerifyConfig(build_dir=tempfile.mkdtemp(prefix="km-redteam-gpu-py-"), timing_trials=0, run_timeout_s=240,
                       time_torch_compile=False)
    task = Task.from_code(SMALL_RELU_TASK, name="relu17", source="seed", level=1)
    code, status = PYTHON_FROM_DEVICE[name]
    v = verify_batch([(task, Candidate(candidate_id=name, task_id=task.task_id, backend="cuda", generator="redteam",
                                       code=code))], config=cfg, compile_workers=2)[0]
    assert v.status == status, (name, v.status, v.cheats, v.feedback[:800])
    if status == "cheat":
        assert cheats.C01 in v.cheats, v.cheats
        assert "host code" in v.feedback, v.feedback[:800]
