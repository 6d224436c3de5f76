"""Verifier precision on the cuda backend (marker gpu): honest CUDA kernels with long fp32 reductions pass
against the tolerance measured from a float64 reference, the same kernels computing at TF32 / fp16 / bf16
precision are C13, a convolution reference is plain fp32 (cuDNN's default TF32 switched off, so a TF32
candidate is not hidden inside the reference's own error), an underflowing reference is the task's fault,
a square-symmetric task's extra shape keeps its contract, and a batch norm whose variance is taken in one pass
passes while the same kernel's output in fp16 is C13 (docs/ANTI_CHEAT.md class 117). One CUDA source holds every kernel (one build).
Runs as `pytest -m gpu tests/gpu`."""

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest  # noqa: E402

from kernelmill.schema import Candidate, Task  # noqa: E402
from verifier import cheats  # noqa: E402
from verifier.engine import VerifyConfig, verify_batch  # noqa: E402
from bench.lib.fixtures import _task  # noqa: E402

pytestmark = pytest.mark.gpu

CUDA_SRC = r'''
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cstdint>

__device__ __forceinline__ float keep_bits(float v, int mantissa) {  // 10: fp16 / TF32, 7: bf16
    if (mantissa >= 23) return v;
    uint32_t b = __float_as_uint(v); uint32_t drop = 23 - mantissa;
    b = (b + (1u << (drop - 1))) & ~((1u << drop) - 1u); return __uint_as_float(b);
}

#define TILE 16
__global__ void mm_tiled(const float* A, const float* B, float* C, int M, int K, int N, int mantissa) {
    __shared__ float As[TILE][TILE]; __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ka = t * TILE + threadIdx.x, kb = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? keep_bits(A[(int64_t)row * K + ka], mantissa) : 0.f;
        Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? keep_bits(B[(int64_t)kb * N + col], mantissa) : 0.f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[(int64_t)row * N + col] = acc;
}

static torch::Tensor mm(torch::Tensor a, torch::Tensor b, int mantissa, int64_t fixed) {
    a = a.contiguous(); b = b.contiguous();
    int M = fixed ? fixed : a.size(0), K = fixed ? fixed : a.size(1), N = fixed ? fixed : b.size(1);
    auto c = torch::zeros({a.size(0), b.size(1)}, a.options());
    dim3 threads(TILE, TILE), blocks((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    mm_tiled<<<blocks, threads>>>(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), M, K, N, mantissa);
    return c;
}
torch::Tensor matmul_fp32(torch::Tensor a, torch::Tensor b) { return mm(a, b, 23, 0); }
torch::Tensor matmul_tf32(torch::Tensor a, torch::Tensor b) { return mm(a, b, 10, 0); }
torch::Tensor matmul_bf16(torch::Tensor a, torch::Tensor b) { return mm(a, b, 7, 0); }
torch::Tensor matmul_fixed_1024(torch::Tensor a, torch::Tensor b) { return mm(a, b, 23, 1024); }

__global__ void row_sum_atomic(const float* x, float* out, int64_t L, int mantissa) {  // block tree + atomics
    __shared__ float s[256];
    int64_t r = blockIdx.y; float acc = 0.f;
    for (int64_t i = blockIdx.x * 256 + threadIdx.x; i < L; i += (int64_t)gridDim.x * 256)
        acc += keep_bits(x[r * L + i], mantissa);
    s[threadIdx.x] = acc; __syncthreads();
    for (int h = 128; h > 0; h >>= 1) { if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h]; __syncthreads(); }
    if (threadIdx.x == 0) atomicAdd(&out[r], s[0]);
}
static torch::Tensor rsum(torch::Tensor x, int mantissa) {
    x = x.contiguous(); int64_t R = x.size(0), L = x.numel() / R;
    auto out = torch::zeros({R}, x.options());
    row_sum_atomic<<<dim3(1024, R), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), L, mantissa);
    return out;
}
torch::Tensor sum_fp32(torch::Tensor x) { return rsum(x, 23); }
torch::Tensor sum_fp16(torch::Tensor x) { return rsum(x, 10); }

__global__ void cumsum_seq(const float* x, float* y, int64_t R, int64_t L) {  // one thread per row, in order
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; if (r >= R) return;
    float acc = 0.f; for (int64_t i = 0; i < L; ++i) { acc += x[r * L + i]; y[r * L + i] = acc; }
}
torch::Tensor cumsum_rows(torch::Tensor x) {
    x = x.contiguous(); auto y = torch::empty_like(x); int64_t R = x.size(0), L = x.size(1);
    cumsum_seq<<<(R + 63) / 64, 64>>>(x.data_ptr<float>(), y.data_ptr<float>(), R, L);
    return y;
}

__global__ void sumsq(const float* x, float* out, int64_t n) {
    __shared__ float s[256]; float acc = 0.f;
    for (int64_t i = (int64_t)blockIdx.x * 256 + threadIdx.x; i < n; i += (int64_t)gridDim.x * 256) acc += x[i] * x[i];
    s[threadIdx.x] = acc; __syncthreads();
    for (int h = 128; h > 0; h >>= 1) { if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h]; __syncthreads(); }
    if (threadIdx.x == 0) atomicAdd(out, s[0]);
}
__global__ void scale_by(const float* x, const float* ss, float* y, int64_t n) {
    float inv = rsqrtf(*ss);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) y[i] = x[i] * inv;
}
torch::Tensor fro_normalize(torch::Tensor x) {
    x = x.contiguous(); auto ss = torch::zeros({1}, x.options()); auto y = torch::empty_like(x); int64_t n = x.numel();
    sumsq<<<2048, 256>>>(x.data_ptr<float>(), ss.data_ptr<float>(), n);
    scale_by<<<4096, 256>>>(x.data_ptr<float>(), ss.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}

__global__ void prod_row(const float* x, float* y, int64_t R, int64_t L) {
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; if (r >= R) return;
    float acc = 1.f; for (int64_t i = 0; i < L; ++i) acc *= x[r * L + i]; y[r] = acc;
}
torch::Tensor prod_rows(torch::Tensor x) {
    x = x.contiguous(); int64_t R = x.size(0), L = x.size(1); auto y = torch::empty({R}, x.options());
    prod_row<<<(R + 127) / 128, 128>>>(x.data_ptr<float>(), y.data_ptr<float>(), R, L);
    return y;
}

// direct 3x3 convolution, stride 1, no padding, one thread per output element, fp32 (or TF32-rounded) terms
__global__ void conv3x3(const float* x, const float* w, const float* b, float* y, int N, int C, int H, int W, int K,
                        int mantissa) {
    int Ho = H - 2, Wo = W - 2; int64_t total = (int64_t)N * K * Ho * Wo;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (int64_t)gridDim.x * blockDim.x) {
        int ow = idx % Wo, oh = (idx / Wo) % Ho, k = (idx / ((int64_t)Wo * Ho)) % K, n = idx / ((int64_t)Wo * Ho * K);
        float acc = b[k];
        for (int c = 0; c < C; ++c) for (int i = 0; i < 3; ++i) for (int j = 0; j < 3; ++j)
            acc += keep_bits(x[(((int64_t)n * C + c) * H + oh + i) * W + ow + j], mantissa) *
                   keep_bits(w[((k * C + c) * 3 + i) * 3 + j], mantissa);
        y[idx] = acc;
    }
}
static torch::Tensor conv(torch::Tensor x, torch::Tensor w, torch::Tensor b, int mantissa) {
    x = x.contiguous(); w = w.contiguous();
    int N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), K = w.size(0);
    auto y = torch::empty({N, K, H - 2, W - 2}, x.options());
    conv3x3<<<4096, 256>>>(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), N, C, H,
                           W, K, mantissa);
    return y;
}
__global__ void swish_bias_k(const float* y, const float* b, float* out, int64_t n, int64_t cols) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = y[i] + b[i % cols]; out[i] = v / (1.f + expf(-v));
    }
}
torch::Tensor swish_bias(torch::Tensor y, torch::Tensor b) {
    y = y.contiguous(); auto out = torch::empty_like(y);
    swish_bias_k<<<1024, 256>>>(y.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), y.numel(), y.size(1));
    return out;
}
// batch norm (training) over the rows of y + bias: one thread per channel, its statistics in one pass of float
// sums (sum and sum of squares, then E[x^2] - E[x]^2), as model-written kernels take them; the output optionally
// rounded to fewer mantissa bits
__global__ void bn_one_pass_k(const float* y, const float* bias, const float* g, const float* be, float* out,
                              int64_t N, int64_t C, float eps, int mantissa) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; if (c >= C) return;
    float s = 0.f, q = 0.f;
    for (int64_t n = 0; n < N; ++n) { float v = y[n * C + c] + bias[c]; s += v; q += v * v; }
    float mean = s / N, var = q / N - mean * mean, inv = rsqrtf(var + eps);
    for (int64_t n = 0; n < N; ++n)
        out[n * C + c] = keep_bits((y[n * C + c] + bias[c] - mean) * inv * g[c] + be[c], mantissa);
}
static torch::Tensor bn(torch::Tensor y, torch::Tensor bias, torch::Tensor g, torch::Tensor be, int mantissa) {
    y = y.contiguous(); auto out = torch::empty_like(y); int64_t N = y.size(0), C = y.size(1);
    bn_one_pass_k<<<(C + 63) / 64, 64>>>(y.data_ptr<float>(), bias.data_ptr<float>(), g.data_ptr<float>(),
                                         be.data_ptr<float>(), out.data_ptr<float>(), N, C, 1e-5f, mantissa);
    return out;
}
torch::Tensor bn_one_pass(torch::Tensor y, torch::Tensor bias, torch::Tensor g, torch::Tensor be) {
    return bn(y, bias, g, be, 23);
}
torch::Tensor bn_one_pass_fp16(torch::Tensor y, torch::Tensor bias, torch::Tensor g, torch::Tensor be) {
    return bn(y, bias, g, be, 10);
}
torch::Tensor conv_fp32(torch::Tensor x, torch::Tensor w, torch::Tensor b) { return conv(x, w, b, 23); }
torch::Tensor conv_tf32(torch::Tensor x, torch::Tensor w, torch::Tensor b) { return conv(x, w, b, 10); }
'''
FUNCS = ["matmul_fp32", "matmul_tf32", "matmul_bf16", "matmul_fixed_1024", "sum_fp32", "sum_fp16", "cumsum_rows",
         "fro_normalize", "prod_rows", "conv_fp32", "conv_tf32", "swish_bias", "bn_one_pass", "bn_one_pass_fp16"]
CPP_SRC = "\n".join(f"torch::Tensor {f}(torch::Tensor a" + (", torch::Tensor b" if f.startswith("matmul") else
                    ", torch::Tensor b, torch::Tensor g, torch::Tensor e" if f.startswith("bn_") else
                    ", torch::Tensor w, torch::Tensor b" if f.startswith("conv") else
                    ", torch::Tensor b" if f == "swish_bias" else "") + ");" for f in FUNCS)


def candidate(forward: str, args: str = "x", init: str = "", params: str = "") -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""{CUDA_SRC}"""
CPP_SRC = """{CPP_SRC}"""
ext = load_inline(name="precision_gpu", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions={FUNCS!r},
                  extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self{', ' + params if params else ''}):
        super().__init__()
        {init or "pass"}

    def forward(self, {args}):
        {forward}
'''


TASKS = {
    "matmul_k8192": _task("torch.matmul(a, b)", "return [torch.randn(1024, 8192), torch.randn(8192, 1024)]",
                          args="a, b"),
    "sum_16m": _task("torch.sum(x, dim=1)", "return [torch.randn(8, 1 << 21)]"),
    "cumsum_32768": _task("torch.cumsum(x, dim=1)", "return [torch.randn(256, 32768)]"),
    "fro_norm_67m": _task("x / torch.norm(x, p='fro')", "return [torch.randn(16, 64, 256, 256)]"),
    "prod_underflow": _task("torch.prod(x, dim=1)", "return [torch.randn(4096, 512)]"),
    "matmul_symmetric": _task("torch.matmul(A, B)", "A = torch.randn(N, N)\n    A = (A + A.T) / 2\n    "
                              "B = torch.randn(N, N)\n    B = (B + B.T) / 2\n    return [A, B]", args="A, B",
                              module="N = 1024"),
    "linear_swish": _task("torch.nn.functional.silu(self.fc(x))", "return [torch.randn(128, 1024)]",
                          init="i, o: self.fc = nn.Linear(i, o)", init_inputs="[1024, 512]"),
    "conv3x3": _task("self.conv(x)", "return [torch.randn(16, 64, 66, 66)]",
                     init="c, k: self.conv = nn.Conv2d(c, k, 3)", init_inputs="[64, 64]"),
    # docs/ANTI_CHEAT.md class 117: channels whose mean lies far from zero (a linear layer of torch.rand inputs)
    "linear_bn": _task("self.bn(self.gemm(x))", "return [torch.rand(16384, 256)]",
                       init="i, o: self.gemm = nn.Linear(i, o)\n        self.bn = nn.BatchNorm1d(o)",
                       init_inputs="[256, 256]"),
    # class 118: a batch norm before a linear layer, every channel far from zero mean (mean / std 7)
    "bn_linear": _task("self.gemm(self.bn(x))", "return [torch.rand(8192, 256) * 2 + 3]",
                       init="i, o: self.bn = nn.BatchNorm1d(i)\n        self.gemm = nn.Linear(i, o, bias=False)",
                       init_inputs="[256, 256]"),
}
CONV_INIT = "self.conv = nn.Conv2d(c, k, 3)"
BN_INIT = "self.gemm = nn.Linear(i, o)\n        self.bn = nn.BatchNorm1d(o)"
BN_FORWARD = ("y = ext.matmul_fp32(x, self.gemm.weight.t().contiguous())\n        "
              "return ext.{}(y, self.gemm.bias, self.bn.weight, self.bn.bias)")
BN_FIRST_INIT = ("self.bn = nn.BatchNorm1d(i)\n        self.gemm = nn.Linear(i, o, bias=False)\n        "
                 "self.register_buffer('zero', torch.zeros(i))")
BN_FIRST_FORWARD = ("h = ext.bn_one_pass(x, self.zero, self.bn.weight, self.bn.bias)\n        "
                    "return ext.{}(h, self.gemm.weight.t().contiguous())")
# parameters of its own names, created in nn.Linear's order: the same values only when both models draw them
# from the same generator (the reference was built on the GPU's generator, the candidate on the cpu's)
OWN_LINEAR_INIT = ("self.w = nn.Parameter(torch.empty(o, i))\n        self.b = nn.Parameter(torch.empty(o))\n        "
                   "nn.init.kaiming_uniform_(self.w, a=5 ** 0.5)\n        bound = 1 / i ** 0.5\n        "
                   "nn.init.uniform_(self.b, -bound, bound)")
CASES = {
    "matmul_k8192_fp32": ("matmul_k8192", candidate("return ext.matmul_fp32(a, b)", "a, b"), "pass", None),
    "matmul_k8192_tf32": ("matmul_k8192", candidate("return ext.matmul_tf32(a, b)", "a, b"), "cheat", cheats.C13),
    "matmul_k8192_bf16": ("matmul_k8192", candidate("return ext.matmul_bf16(a, b)", "a, b"), "cheat", cheats.C13),
    "sum_16m_fp32": ("sum_16m", candidate("return ext.sum_fp32(x)"), "pass", None),
    "sum_16m_fp16": ("sum_16m", candidate("return ext.sum_fp16(x)"), "cheat", cheats.C13),
    "cumsum_32768_sequential": ("cumsum_32768", candidate("return ext.cumsum_rows(x)"), "pass", None),
    "fro_norm_67m": ("fro_norm_67m", candidate("return ext.fro_normalize(x)"), "pass", None),
    "prod_underflow": ("prod_underflow", candidate("return ext.prod_rows(x)"), "task_error", None),
    "symmetric_square_one_n": ("matmul_symmetric", candidate("return ext.matmul_fp32(A, B)", "A, B"), "pass", None),
    "symmetric_square_hardcoded": ("matmul_symmetric", candidate("return ext.matmul_fixed_1024(A, B)", "A, B"),
                                   "cheat", cheats.C14),
    "linear_own_parameter_names": ("linear_swish", candidate(
        "y = ext.matmul_fp32(x, self.w.t().contiguous())\n        return ext.swish_bias(y, self.b)", init=OWN_LINEAR_INIT,
        params="i, o"), "pass", None),
    "conv_fp32": ("conv3x3", candidate("return ext.conv_fp32(x, self.conv.weight, self.conv.bias)", init=CONV_INIT,
                                       params="c, k"), "pass", None),
    "conv_tf32": ("conv3x3", candidate("return ext.conv_tf32(x, self.conv.weight, self.conv.bias)", init=CONV_INIT,
                                       params="c, k"), "cheat", cheats.C13),
    "bn_one_pass": ("linear_bn", candidate(BN_FORWARD.format("bn_one_pass"), init=BN_INIT, params="i, o"), "pass",
                    None),
    "bn_one_pass_fp16": ("linear_bn", candidate(BN_FORWARD.format("bn_one_pass_fp16"), init=BN_INIT, params="i, o"),
                         "cheat", cheats.C13),
    "bn_one_pass_then_linear": ("bn_linear", candidate(BN_FIRST_FORWARD.format("matmul_fp32"), init=BN_FIRST_INIT,
                                                       params="i, o"), "pass", None),
    "bn_one_pass_then_linear_tf32": ("bn_linear", candidate(BN_FIRST_FORWARD.format("matmul_tf32"),
                                                            init=BN_FIRST_INIT, params="i, o"), "cheat", cheats.C13),
}
BUILD_DIR = os.environ.get("KM_GPU_BUILDS") or tempfile.mkdtemp(prefix="km-gpu-builds-")
_CACHE: dict = {}


def verdicts() -> dict:
    if not _CACHE:
        tasks = {n: Task.from_code(c, name=n, source="seed", level=1) for n, c in TASKS.items()}
        cfg = VerifyConfig(build_dir=BUILD_DIR, timing_trials=5, time_torch_compile=False, run_timeout_s=180,
                           exec_workers=4)
        items = [(tasks[t], Candidate(candidate_id=n, task_id=tasks[t].task_id, backend="cuda", generator="test",
                                      code=c)) for n, (t, c, _, _) in CASES.items()]
        _CACHE.update(zip(CASES, verify_batch(items, config=cfg, compile_workers=os.cpu_count())))
    return _CACHE


@pytest.mark.parametrize("name", list(CASES))
def test_precision_case(name):
    _, _, status, code = CASES[name]
    v = verdicts()[name]
    print(f"{name}: {v.status} {v.cheats} max_abs_err={v.max_abs_err} {v.versions.get('tolerance')}")
    assert v.status == status, (name, v.status, v.cheats, v.feedback)
    if code:
        assert code in v.cheats, (name, v.cheats, v.feedback)
    if status == "pass":
        assert v.correct and v.versions.get("tolerance") == "float64 reference", v.versions


def test_extra_shape_is_square_and_symmetric():
    """The extra shape keeps the task's one N for every dimension (square, symmetric); its step is drawn at random
    per plan (N = 1024 becomes 1280, 1536, 1792 or 2048), so a kernel written for one fixed step meets another."""
    import re

    v = verdicts()["symmetric_square_one_n"]
    assert v.trials == 6, v.feedback
    m = re.search(r"\[(\d+), (\d+)\], \[(\d+), (\d+)\]", verdicts()["symmetric_square_hardcoded"].feedback)
    assert m and len(set(m.groups())) == 1 and int(m.group(1)) in (1280, 1536, 1792, 2048), \
        verdicts()["symmetric_square_hardcoded"].feedback
