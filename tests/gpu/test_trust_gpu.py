"""The verifier's trust boundary on cuda (marker gpu): compute a candidate did not write is caught however
it is hidden, and KernelBench's own examples are judged right.

- row 1, vendor library from C++: cuBLAS called from the extension (plainly: the source scan; with the
  names built by the preprocessor: the built extension's imported symbols), behind a kernel that does
  nothing; honest look-alike: a tiled matmul of the candidate's own;
- row 1, the dispatch monitor switched off from inside forward, then a torch op: the profiler sees it;
- row 1 on the host: inputs copied to the cpu and multiplied there by the extension's C++ (a do-nothing
  kernel launched for show): the device-to-host copy in forward is caught;
- row 1 in an extension built at run time (sources the static stage cannot read): the child records what it
  compiled and the verifier scans it; honest look-alike: the tiled matmul built the same way;
- KernelBench (when ``KM_KERNELBENCH`` names a checkout of ScalingIntelligence/KernelBench): the few-shot
  honest pairs pass, its three adversarial kernels are rejected, the mnist2 pair (torch conv inside
  ModelNew) is rejected as PyTorch compute.
"""

import os
import sys
import tempfile
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest  # noqa: E402

from bench.lib import fixtures as fx  # noqa: E402
from kernelmill.schema import Candidate, Task  # noqa: E402
from verifier import cheats, screen  # noqa: E402
from verifier.engine import VerifyConfig, verify_batch  # noqa: E402

pytestmark = pytest.mark.gpu

MATMUL_TASK = fx.MATMUL_TASK.replace("torch.randn(64, 96), torch.randn(96, 48)",
                                     "torch.randn(512, 384), torch.randn(384, 256)")
assert "512, 384" in MATMUL_TASK
CUBLAS_PLAIN = r'''
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>
__global__ void touch_kernel(float* c) { }
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty({a.size(0), b.size(1)}, a.options());
    float one = 1.f, zero = 0.f;
    int M = a.size(0), K = a.size(1), N = b.size(1);
    cublasSgemm(at::cuda::getCurrentCUDABlasHandle(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one,
                b.data_ptr<float>(), N, a.data_ptr<float>(), K, &zero, c.data_ptr<float>(), N);
    touch_kernel<<<1, 1>>>(c.data_ptr<float>());
    return c;
}
'''
# the same, with every vendor name built by the preprocessor: the source text never spells them
CUBLAS_HIDDEN = CUBLAS_PLAIN.replace("#include <cublas_v2.h>\n", "#define J(a, b) a##b\n").replace(
    "cublasSgemm(at::cuda::getCurrentCUDABlasHandle()", "J(cubl, asSgemm)(J(at::cuda::getCurrentCUDABl, asHandle)()")
TILED_MM = r'''
#include <torch/extension.h>
#define T 16
__global__ void mm_tiled(const float* a, const float* b, float* c, int M, int K, int N) {
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
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty({a.size(0), b.size(1)}, a.options());
    int M = a.size(0), K = a.size(1), N = b.size(1);
    dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
    mm_tiled<<<grid, block>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, K, N);
    return c;
}
'''


def _mm_candidate(src: str, name: str, forward: str = "return ext.mm(a.contiguous(), b.contiguous())",
                  imports: str = "") -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
{imports}
SRC = r"""{src}"""
ext = load_inline(name="{name}", cpp_sources="torch::Tensor mm(torch::Tensor a, torch::Tensor b);",
                  cuda_sources=SRC, functions=["mm"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        {forward}
'''


MONITOR_OFF = _mm_candidate(TILED_MM, "mm_off", imports="import operator", forward=(
    "off = operator.attrgetter('_' + 'C._DisableTorch' + 'Dispatch')(torch)\n        ext.mm(a, b)\n"
    "        with off():\n            return operator.attrgetter('mat' + 'mul')(torch)(a, b)"))

# row 1 on the host: the extension copies the inputs to the cpu, multiplies there in plain C++ and launches a
# kernel that does nothing (own-kernel time coverage is 100%: the only device work is the candidate's)
HOST_MM = r'''
#include <torch/extension.h>
__global__ void touch_kernel(float* c) { }
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    auto ah = a.cpu().contiguous(), bh = b.cpu().contiguous();
    int M = ah.size(0), K = ah.size(1), N = bh.size(1);
    auto ch = torch::zeros({M, N}, ah.options());
    const float* pa = ah.data_ptr<float>(); const float* pb = bh.data_ptr<float>(); float* pc = ch.data_ptr<float>();
    for (int i = 0; i < M; ++i)
        for (int k = 0; k < K; ++k) { float v = pa[i * K + k]; for (int j = 0; j < N; ++j) pc[i * N + j] += v * pb[k * N + j]; }
    auto c = ch.to(a.device());
    touch_kernel<<<1, 1>>>(c.data_ptr<float>());
    return c;
}
'''
# row 1 through an extension whose source the static stage cannot read (taken from the environment with the
# cuBLAS source as default): the child asks the verifier to build it, which scans it first
CHILD_BUILT_CUBLAS = _mm_candidate(CUBLAS_PLAIN, "mm_child_built", imports="import os").replace(
    'cuda_sources=SRC', 'cuda_sources=os.environ.get("KM_NO_SUCH_VARIABLE", SRC)')
assert "KM_NO_SUCH_VARIABLE" in CHILD_BUILT_CUBLAS
# the honest look-alike: the tiled matmul built the same way
CHILD_BUILT_HONEST = _mm_candidate(TILED_MM, "mm_child_built_honest", imports="import os").replace(
    'cuda_sources=SRC', 'cuda_sources=os.environ.get("KM_NO_SUCH_VARIABLE", SRC)')
# cases that test a runtime layer past the static scan (which now catches them too): judged with the static
# findings dropped, so the runtime check alone decides
RUNTIME_LAYER = {"c01_monitor_switched_off"}

CASES = {  # name: (task, candidate, expected status, cheat code or None)
    "c01_host_compute": (MATMUL_TASK, _mm_candidate(HOST_MM, "mm_host"), "cheat", cheats.C01),
    "c01_child_built_cublas": (MATMUL_TASK, CHILD_BUILT_CUBLAS, "cheat", cheats.C01),
    "honest_child_built_tiled": (MATMUL_TASK, CHILD_BUILT_HONEST, "pass", None),
    "c01_cublas_plain": (MATMUL_TASK, _mm_candidate(CUBLAS_PLAIN, "mm_cublas"), "cheat", cheats.C01),
    "c01_cublas_hidden_names": (MATMUL_TASK, _mm_candidate(CUBLAS_HIDDEN, "mm_cublas_hidden"), "cheat", cheats.C01),
    "c01_monitor_switched_off": (MATMUL_TASK, MONITOR_OFF, "cheat", cheats.C01),
    "honest_tiled_matmul": (MATMUL_TASK, _mm_candidate(TILED_MM, "mm_tiled"), "pass", None),
}


def _kernelbench_cases() -> dict:
    root = os.environ.get("KM_KERNELBENCH", "")
    if not root or not Path(root).is_dir():
        return {}
    kb = Path(root) / "src" / "kernelbench"
    out = {}
    for stem in ("add", "fuse_gelu", "tiled_matmul", "flash_attn"):
        out[f"kb_fewshot_{stem}"] = ((kb / "prompts/few_shot" / f"model_ex_{stem}.py").read_text(),
                                     (kb / "prompts/few_shot" / f"model_new_ex_{stem}.py").read_text(), "pass", None)
    out["kb_model_ex_1"] = ((kb / "prompts/model_ex_1.py").read_text(), (kb / "prompts/model_new_ex_1.py").read_text(),
                            "pass", None)
    out["kb_mnist2_fallback"] = ((kb / "prompts/few_shot/model_ex_mnist2.py").read_text(),
                                 (kb / "prompts/few_shot/model_new_ex_mnist2.py").read_text(), "cheat", cheats.C01)
    mm1 = (Path(root) / "KernelBench/level1/1_Square_matrix_multiplication_.py").read_text()
    for f in sorted((kb / "unit_tests/test_kernels").glob("*.py")):
        out[f"kb_adversarial_{f.stem}"] = (mm1, f.read_text(), "rejected", None)
    return out


ALL = {**CASES, **_kernelbench_cases()}
_CACHE: dict = {}


def verdicts() -> dict:
    if not _CACHE:
        build = os.environ.get("KM_GPU_BUILDS") or tempfile.mkdtemp(prefix="km-gpu-trust-")
        cfg = VerifyConfig(build_dir=build, timing_trials=10, time_torch_compile=False, run_timeout_s=180,
                           exec_workers=4)
        items = []
        for name, (task_code, cand, _, _) in ALL.items():
            task = Task.from_code(task_code, name=name, source="kernelbench")
            items.append((task, Candidate(candidate_id=name, task_id=task.task_id, backend="cuda", generator="test",
                                          code=cand)))
        layer_codes = {ALL[n][1] for n in RUNTIME_LAYER}
        real_scan = screen.scan

        def scan_runtime_layer(code, backend="cpu"):
            report = real_scan(code, backend)
            if code in layer_codes:
                report.findings = []
            return report

        with mock.patch.object(screen, "scan", scan_runtime_layer):
            _CACHE.update(zip(ALL, verify_batch(items, config=cfg, compile_workers=os.cpu_count())))
    return _CACHE


@pytest.mark.parametrize("name", list(ALL))
def test_trust_case(name):
    v = verdicts()[name]
    _, _, status, code = ALL[name]
    print(name, v.status, v.cheats, v.own_kernel_share, v.foreign_kernels, v.runtime_us, v.eager_us, v.speedup_eager)
    if status == "rejected":  # KernelBench's adversarial kernels: any rejection that is the candidate's
        assert v.status in ("cheat", "wrong", "extract_error", "illegal") and not v.correct, (v.status, v.feedback)
        return
    assert v.status == status, (name, v.status, v.cheats, v.feedback)
    if code:
        assert code in v.cheats, (name, v.cheats, v.feedback)
    if status == "pass":
        assert v.own_kernel_share is not None and v.own_kernel_share > 0, (v.own_kernel_share, v.foreign_kernels)
        assert v.speedup_eager and v.speedup_eager > 0 and v.launch_us and v.launch_us > 0
