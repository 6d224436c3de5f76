"""Small tasks and candidates for the verifier's own tests and benchmark (torch + stdlib only).

All cpu candidates share ONE C++ source (``SHARED_CPP``) with every function the tests need, honest
and dishonest, so a whole test session builds a single extension (identical sources share a build).
``cuda_relu_candidate(k)`` makes distinct small CUDA candidates for the GPU tests and the benchmark.
"""

from __future__ import annotations

import contextlib
from unittest import mock

RELU_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64, 1000)]


def get_init_inputs():
    return []
'''

MATMUL_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(64, 96), torch.randn(96, 48)]


def get_init_inputs():
    return []
'''

SHARED_CPP = r'''
#include <torch/extension.h>
#include <vector>
#include <cstring>

torch::Tensor relu(torch::Tensor x) {
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
    return out;
}
void relu_into(torch::Tensor x, torch::Tensor out) {
    const float* in = x.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
}
torch::Tensor relu_inplace(torch::Tensor x) {
    float* p = x.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = p[i] > 0.f ? p[i] : 0.f;
    return x;
}
torch::Tensor relu_lowp(torch::Tensor x) {  // keeps 10 mantissa bits, like fp16
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
        float v = in[i] > 0.f ? in[i] : 0.f; uint32_t b; std::memcpy(&b, &v, 4); b &= 0xFFFFE000u; std::memcpy(&o[i], &b, 4);
    }
    return out;
}
torch::Tensor relu_fixed_rows(torch::Tensor x) {  // hard-codes 64 rows
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>(); float* o = out.data_ptr<float>();
    int64_t cols = x.size(1);
    for (int64_t i = 0; i < 64 * cols; ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
    return out;
}
void touch(torch::Tensor x) { (void)x.data_ptr<float>(); }
torch::Tensor matmul(torch::Tensor a, torch::Tensor b) {
    int64_t M = a.size(0), K = a.size(1), N = b.size(1);
    auto out = torch::empty({M, N}, a.options());
    const float* A = a.data_ptr<float>(); const float* B = b.data_ptr<float>(); float* C = out.data_ptr<float>();
    for (int64_t i = 0; i < M; ++i) for (int64_t j = 0; j < N; ++j) {
        double acc = 0; for (int64_t k = 0; k < K; ++k) acc += (double)A[i * K + k] * B[k * N + j]; C[i * N + j] = (float)acc;
    }
    return out;
}
void segv(torch::Tensor x) { volatile float* p = nullptr; *p = 1.0f; }
void spin(torch::Tensor x) { volatile int64_t k = 0; while (true) { k = k + 1; } }
torch::Tensor hog(torch::Tensor x) {
    std::vector<float> v((size_t)25000000000ULL); v[0] = 1.f; v[v.size() - 1] = 2.f; return x;
}
'''

# an honest matmul of any size in plain loops, for the red-team files whose extensions are their own
# (tests/redteam/test_redteam_sealed_files.py, test_redteam_child_builds.py, test_redteam_binary_compute.py)
NAIVE_MM_CPP = r'''
static torch::Tensor naive_mm(const torch::Tensor& a_in, const torch::Tensor& b_in) {
    auto a = a_in.contiguous(), b = b_in.contiguous();
    const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
    auto out = torch::zeros({M, N}, a.options());
    const float* A = a.data_ptr<float>(); const float* B = b.data_ptr<float>(); float* C = out.data_ptr<float>();
    for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k) {
            const float av = A[i * K + k];
            for (int64_t j = 0; j < N; ++j) C[i * N + j] += av * B[k * N + j];
        }
    return out;
}
'''

SHARED_FUNCS = ["relu", "relu_into", "relu_inplace", "relu_lowp", "relu_fixed_rows", "touch", "matmul",
                "segv", "spin", "hog"]
# PyTorch's relu called from the C++: an extension of its own (the shared one plus it), since ATen compute the
# built extension imports is PyTorch compute in forward for the verifier whether or not forward calls it
ATEN_CPP = SHARED_CPP + "torch::Tensor relu_aten(torch::Tensor x) { return at::relu(x); }\n"
ATEN_FUNCS = SHARED_FUNCS + ["relu_aten"]


def cpu_candidate(forward: str, *, init: str = "", imports: str = "", module: str = "",
                  bases: str = "nn.Module", args: str = "x") -> str:
    """A cpu candidate using the shared extension (or, where it calls ``relu_aten``, the shared one with PyTorch's
    relu beside it); ``forward`` is the body of ModelNew.forward."""
    def indent(s: str, n: int) -> str:
        return "\n".join(" " * n + ln if ln.strip() else ln for ln in s.strip("\n").splitlines())

    aten = "relu_aten" in forward + init + module
    cpp, funcs, name = (ATEN_CPP, ATEN_FUNCS, "aten_ext") if aten else (SHARED_CPP, SHARED_FUNCS, "shared_ext")
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
{imports}
CPP = r"""{cpp}"""
FUNCS = {funcs!r}
ext = load_inline(name="{name}", cpp_sources=CPP, functions=FUNCS, extra_cflags=["-O2"])
{module}

class ModelNew({bases}):
    def __init__(self):
        super().__init__()
{indent(init, 8) if init.strip() else "        pass"}

    def forward(self, {args}):
{indent(forward, 8)}
'''


HONEST_RELU = cpu_candidate("return ext.relu(x.contiguous())")
HONEST_MATMUL = cpu_candidate("return ext.matmul(a.contiguous(), b.contiguous())", args="a, b")
BROKEN_CPP = cpu_candidate("return ext2.relu(x)", module='ext2 = load_inline(name="b", cpp_sources="int f( { return 1; }", '
                                                     'functions=["relu"])')

CUDA_RELU_TEMPLATE = r'''
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel_{k}(const float* __restrict__ x, float* __restrict__ y, long n) {{
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long stride = (long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {{ float v = x[i]; y[i] = v > {thresh}f ? v : 0.0f; }}
}}

torch::Tensor relu_cuda(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    long n = x.numel();
    int threads = {threads};
    int blocks = (int)std::min<long>((n + threads - 1) / threads, 65535L);
    relu_kernel_{k}<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}}
'''

CUDA_RELU_TASK = RELU_TASK.replace("torch.randn(64, 1000)", "torch.randn(2048, 4096)")


def cuda_relu_candidate(k: int, *, forward: str = "return self.ext.relu_cuda(x.contiguous())", imports: str = "") -> str:
    """A distinct honest CUDA ReLU candidate per k (different launch size; threshold 0)."""
    threads = (128, 256, 512, 1024)[k % 4]
    src = CUDA_RELU_TEMPLATE.format(k=k, thresh="0.0", threads=threads)
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
{imports}
CUDA_SRC = r"""{src}"""
CPP_SRC = "torch::Tensor relu_cuda(torch::Tensor x);"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = load_inline(name="relu_{k}", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                               functions=["relu_cuda"], extra_cuda_cflags=["-O3"])

    def forward(self, x):
        {forward}
'''


def cuda_relu_verdicts(codes: dict[str, str], generator: str, timing_trials: int = 4) -> dict:
    """Each program of ``codes`` (name -> source) verified on cuda against CUDA_RELU_TASK in one batch, at the GPU red
    teams' settings (3 trials, ``timing_trials`` timed brackets, no torch.compile timing, three execution slots, a
    fresh build root): the verdicts by name."""
    import tempfile

    from kernelmill.schema import Candidate, Task
    from verifier.engine import VerifyConfig, verify_batch

    cfg = VerifyConfig(build_dir=tempfile.mkdtemp(prefix=f"km-{generator}-gpu-"), trials=3, timing_trials=timing_trials,
                       time_torch_compile=False, run_timeout_s=120, exec_workers=3)
    task = Task.from_code(CUDA_RELU_TASK, name="relu", source="seed", level=1)
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cuda", generator=generator, code=c))
             for n, c in codes.items()]
    return {v.candidate_id: v for v in verify_batch(items, config=cfg, compile_workers=4)}


CUDA_RELU_BARE_TEMPLATE = r'''
#include <cstdint>
__global__ void relu_bare_{k}(const float* __restrict__ x, float* __restrict__ y, int64_t n) {{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{ float v = x[i]; y[i] = v > 0.0f ? v : 0.0f; }}
}}
void relu_launch(const float* x, float* y, int64_t n, cudaStream_t s) {{
    relu_bare_{k}<<<(unsigned)((n + {threads} - 1) / {threads}), {threads}, 0, s>>>(x, y, n);
}}
'''

CPP_RELU_BARE_WRAPPER = r'''
#include <ATen/cuda/CUDAContext.h>
void relu_launch(const float* x, float* y, int64_t n, cudaStream_t s);
torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    relu_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), at::cuda::getCurrentCUDAStream());
    return y;
}
'''


def cuda_relu_bare_candidate(k: int) -> str:
    """An honest CUDA ReLU whose CUDA source names nothing from torch (the torch wrapper is in cpp_sources):
    the verifier builds it as the fast 'bare' variant."""
    threads = (128, 256, 512, 1024)[k % 4]
    src = CUDA_RELU_BARE_TEMPLATE.format(k=k, threads=threads)
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""{src}"""
CPP_SRC = r"""{CPP_RELU_BARE_WRAPPER}"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = load_inline(name="relu_bare_{k}", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                               functions=["relu_cuda"], extra_cuda_cflags=["-O3"])

    def forward(self, x):
        return self.ext.relu_cuda(x)
'''


# ---------------------------------------------------------------------------- numerics and task contracts
# Honest kernels that accumulate in fp32 in another order than torch (long reductions), the same computations
# at lower precision (C13), a task whose reference underflows (the task's fault), a task that guarantees square
# symmetric inputs, and parameters initialised the way nn.Linear does it. One C++ source for all (one build).

PRECISION_CPP = r'''
#include <torch/extension.h>
#include <cstring>
#include <cmath>

static inline float keep_bits(float v, int mantissa) {  // round to `mantissa` bits: fp16/TF32 (10), bf16 (7)
    uint32_t b; std::memcpy(&b, &v, 4);
    uint32_t drop = 23 - mantissa; b = (b + (1u << (drop - 1))) & ~((1u << drop) - 1u);
    float o; std::memcpy(&o, &b, 4); return o;
}
static torch::Tensor mm(torch::Tensor a, torch::Tensor b, int mantissa) {  // one fp32 accumulator per output
    a = a.contiguous(); b = b.contiguous();
    int64_t M = a.size(0), K = a.size(1), N = b.size(1);
    auto out = torch::empty({M, N}, a.options());
    const float* A = a.data_ptr<float>(); const float* B = b.data_ptr<float>(); float* C = out.data_ptr<float>();
    for (int64_t i = 0; i < M; ++i) for (int64_t j = 0; j < N; ++j) {
        float acc = 0.f;
        for (int64_t k = 0; k < K; ++k) {
            float x = A[i * K + k], y = B[k * N + j];
            if (mantissa < 23) { x = keep_bits(x, mantissa); y = keep_bits(y, mantissa); }
            acc += x * y;
        }
        C[i * N + j] = acc;
    }
    return out;
}
torch::Tensor matmul_f32(torch::Tensor a, torch::Tensor b) { return mm(a, b, 23); }
torch::Tensor matmul_tf32(torch::Tensor a, torch::Tensor b) { return mm(a, b, 10); }
torch::Tensor matmul_bf16(torch::Tensor a, torch::Tensor b) { return mm(a, b, 7); }
torch::Tensor matmul_square(torch::Tensor a, torch::Tensor b) {  // the task guarantees one N for every dimension
    int64_t n = a.size(0); a = a.contiguous(); b = b.contiguous();
    auto out = torch::empty({n, n}, a.options());
    const float* A = a.data_ptr<float>(); const float* B = b.data_ptr<float>(); float* C = out.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) for (int64_t j = 0; j < n; ++j) {
        float acc = 0.f; for (int64_t k = 0; k < n; ++k) acc += A[i * n + k] * B[k * n + j]; C[i * n + j] = acc;
    }
    return out;
}
torch::Tensor matmul_square_fixed(torch::Tensor a, torch::Tensor b) {  // hard-codes n = 64
    const int64_t n = 64; a = a.contiguous(); b = b.contiguous(); int64_t m = a.size(0);
    auto out = torch::zeros({m, m}, a.options());
    const float* A = a.data_ptr<float>(); const float* B = b.data_ptr<float>(); float* C = out.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) for (int64_t j = 0; j < n; ++j) {
        float acc = 0.f; for (int64_t k = 0; k < n; ++k) acc += A[i * m + k] * B[k * m + j]; C[i * m + j] = acc;
    }
    return out;
}
torch::Tensor sum_rows(torch::Tensor x) {  // one sequential fp32 sum per row
    x = x.contiguous(); int64_t R = x.size(0), L = x.numel() / R;
    auto out = torch::empty({R}, x.options()); const float* p = x.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (int64_t r = 0; r < R; ++r) { float acc = 0.f; for (int64_t i = 0; i < L; ++i) acc += p[r * L + i]; o[r] = acc; }
    return out;
}
torch::Tensor sum_rows_half(torch::Tensor x) {  // the same with the inputs rounded to 10 mantissa bits
    x = x.contiguous(); int64_t R = x.size(0), L = x.numel() / R;
    auto out = torch::empty({R}, x.options()); const float* p = x.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (int64_t r = 0; r < R; ++r) { float acc = 0.f; for (int64_t i = 0; i < L; ++i) acc += keep_bits(p[r * L + i], 10); o[r] = acc; }
    return out;
}
torch::Tensor cumsum_rows(torch::Tensor x) {  // sequential fp32 scan per row
    x = x.contiguous(); int64_t R = x.size(0), L = x.size(1);
    auto out = torch::empty_like(x); const float* p = x.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (int64_t r = 0; r < R; ++r) { float acc = 0.f; for (int64_t i = 0; i < L; ++i) { acc += p[r * L + i]; o[r * L + i] = acc; } }
    return out;
}
torch::Tensor fro_normalize(torch::Tensor x) {  // x / ||x||_F with one fp32 accumulator over every element
    x = x.contiguous(); auto out = torch::empty_like(x); const float* p = x.data_ptr<float>(); float* o = out.data_ptr<float>();
    float acc = 0.f; for (int64_t i = 0; i < x.numel(); ++i) acc += p[i] * p[i];
    float inv = 1.f / std::sqrt(acc); for (int64_t i = 0; i < x.numel(); ++i) o[i] = p[i] * inv;
    return out;
}
torch::Tensor prod_rows(torch::Tensor x) {
    x = x.contiguous(); int64_t R = x.size(0), L = x.size(1);
    auto out = torch::empty({R}, x.options()); const float* p = x.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (int64_t r = 0; r < R; ++r) { float acc = 1.f; for (int64_t i = 0; i < L; ++i) acc *= p[r * L + i]; o[r] = acc; }
    return out;
}
torch::Tensor gelu_crude(torch::Tensor x) {  // "fast math" far outside fp32: tanh by a 3-term rational guess
    x = x.contiguous(); auto out = torch::empty_like(x); const float* p = x.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) { float v = p[i]; float u = 0.7978845608f * (v + 0.044715f * v * v * v);
        float t = u < -3.f ? -1.f : (u > 3.f ? 1.f : u * (27.f + u * u) / (27.f + 9.f * u * u)); o[i] = 0.5f * v * (1.f + t); }
    return out;
}
torch::Tensor gelu_erf(torch::Tensor x) {
    x = x.contiguous(); auto out = torch::empty_like(x); const float* p = x.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = 0.5f * p[i] * (1.f + std::erf(p[i] * 0.70710678118654752f));
    return out;
}
torch::Tensor linear(torch::Tensor x, torch::Tensor w, torch::Tensor b) {  // x @ w.T + b
    x = x.contiguous(); w = w.contiguous(); int64_t M = x.size(0), K = x.size(1), N = w.size(0);
    auto out = torch::empty({M, N}, x.options());
    const float* X = x.data_ptr<float>(); const float* W = w.data_ptr<float>(); const float* B = b.data_ptr<float>();
    float* O = out.data_ptr<float>();
    for (int64_t i = 0; i < M; ++i) for (int64_t j = 0; j < N; ++j) {
        float acc = B[j]; for (int64_t k = 0; k < K; ++k) acc += X[i * K + k] * W[j * K + k]; O[i * N + j] = acc;
    }
    return out;
}
torch::Tensor relu(torch::Tensor x) {
    x = x.contiguous(); auto out = torch::empty_like(x); const float* p = x.data_ptr<float>(); float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = p[i] > 0.f ? p[i] : 0.f;
    return out;
}
torch::Tensor tiny_copy(torch::Tensor x) { return x; }
'''
PRECISION_FUNCS = ["matmul_f32", "matmul_tf32", "matmul_bf16", "matmul_square", "matmul_square_fixed", "sum_rows",
                   "sum_rows_half", "cumsum_rows", "fro_normalize", "prod_rows", "gelu_crude", "gelu_erf", "linear",
                   "relu", "tiny_copy"]


def _task(forward: str, inputs: str, *, args: str = "x", init: str = "", init_inputs: str = "[]",
          module: str = "") -> str:
    return f'''import torch
import torch.nn as nn
{module}

class Model(nn.Module):
    def __init__(self{init and ', ' + init.split(':')[0]}):
        super().__init__()
        {init.split(':', 1)[1].strip() if init else "pass"}

    def forward(self, {args}):
        return {forward}


def get_inputs():
    {inputs}


def get_init_inputs():
    return {init_inputs}
'''


PRECISION_TASKS = {
    # K = 8192: an fp32 dot product of 8192 terms; 64 x 64 outputs keep the cpu build of the test fast
    "matmul_long_k": _task("torch.matmul(a, b)", "return [torch.randn(64, 8192), torch.randn(8192, 64)]",
                           args="a, b"),
    "sum_1m": _task("torch.sum(x, dim=1)", "return [torch.randn(4, 1 << 20)]"),
    "cumsum_long": _task("torch.cumsum(x, dim=1)", "return [torch.randn(16, 32768)]"),
    # a running sum out to about 2000 and back near zero for the last three quarters of each row: the late values
    # are small, the rounding a sequential accumulator carries into them is the excursion's
    "cumsum_excursion": _task("torch.cumsum(x, dim=1)", "x = torch.randn(8, 32768) * 0.2\n    x[:, :4096] += 0.5\n"
                              "    x[:, 4096:8192] -= 0.5\n    return [x]"),
    "fro_norm_2m": _task("x / torch.norm(x, p='fro')", "return [torch.randn(32, 256, 256)]"),
    "gelu": _task("torch.nn.functional.gelu(x)", "return [torch.randn(256, 1024) * 3]"),
    # the reference underflows: a product of 512 normals is 0 in fp32 (about e^-325) for every row
    "prod_underflow": _task("torch.prod(x, dim=1)", "return [torch.randn(128, 512)]"),
    # constant in exact arithmetic (a row's mean after centring), varying only by fp32 rounding (~1e-8)
    "centred_mean": _task("torch.mean(x - torch.mean(x, dim=1, keepdim=True), dim=1)",
                          "return [torch.randn(64, 4096)]"),
    # one N for every dimension, symmetric inputs: another valid shape keeps both (N changes, A stays A.T)
    "matmul_symmetric": _task("torch.matmul(A, B)", "A = torch.randn(N, N)\n    A = (A + A.T) / 2\n    "
                              "B = torch.randn(N, N)\n    B = (B + B.T) / 2\n    return [A, B]", args="A, B",
                              module="N = 64"),
    "linear": _task("self.fc(x)", "return [torch.randn(32, 256)]",
                    init="in_features, out_features: self.fc = nn.Linear(in_features, out_features)",
                    init_inputs="[256, 128]"),
    "linear_relu": _task("torch.relu(self.fc(x))", "return [torch.randn(32, 256)]",
                         init="in_features, out_features: self.fc = nn.Linear(in_features, out_features)",
                         init_inputs="[256, 128]"),
}


def precision_candidate(forward: str, *, args: str = "x", init: str = "", params: str = "") -> str:
    """A cpu candidate using the shared precision extension; ``forward`` is the body of ModelNew.forward,
    ``init`` more lines of __init__ (``params``: its extra parameters), ``ext`` the extension."""
    def indent(s: str, n: int) -> str:
        return "\n".join(" " * n + ln if ln.strip() else ln for ln in s.strip("\n").splitlines())

    return f'''import math
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""{PRECISION_CPP}"""
FUNCS = {PRECISION_FUNCS!r}
ext = load_inline(name="precision_ext", cpp_sources=CPP, functions=FUNCS, extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self{', ' + params if params else ''}):
        super().__init__()
{indent(init, 8) if init.strip() else "        pass"}

    def forward(self, {args}):
{indent(forward, 8)}
'''


# nn.Linear's own initialisation, written out as models write it (a helper called from __init__)
LINEAR_INIT = '''self.weight = nn.Parameter(torch.empty(out_features, in_features))
self.bias = nn.Parameter(torch.empty(out_features))
self.reset_parameters()'''
LINEAR_RESET = '''
    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        self.bias.data.uniform_(-bound, bound)
'''


def linear_candidate(forward: str = "return ext.linear(x, self.weight, self.bias)", *, extra_init: str = "") -> str:
    code = precision_candidate(forward, init=LINEAR_INIT + ("\n" + extra_init if extra_init else ""),
                               params="in_features, out_features")
    return code.replace("\n    def forward(", LINEAR_RESET + "\n    def forward(", 1)


# The omnipotent hook (tests/redteam/test_redteam_omnipotent.py, tests/gpu/redteam/test_redteam_omnipotent_gpu.py):
# module-level code of a candidate that replaces, inside its own process, every object the verifier's code there
# relies on; it stands for native code that can rewrite any byte of that process. ``TIMED[0]`` turns True when the
# harness's timed brackets begin, so a candidate can behave differently there.
OMNIPOTENT = '''
import sys, time, random, secrets
_W = next(m for m in list(sys.modules.values()) if hasattr(m, "Guard") and hasattr(m, "run_job"))  # __main__ there
_W.Guard.tampered = lambda self, phase: False                      # the in-process tamper check, blinded
_CH = sys.modules["verifier.child.channel"].Channel
_send = _CH.record
def _record(self, key, rec):                                       # the monitors' records, emptied on their way out
    rec = dict(rec, dispatched_ops=[], profiled_ops=[], monitor_problems=[], threads_added=0,
               kernel_calls=max(1, rec.get("kernel_calls", 0)))
    return _send(self, key, rec)
_CH.record = _record
_C = sys.modules["verifier.common.contract"]
_write = _C.ChildReport.write
def _report(self, d):                                              # the report's own figures, forged
    for t in (self.candidate, self.eager, self.compiled):
        if t is not None:
            t.launch_us = [0.5 for _ in t.launch_us]
            t.device_us = [0.5] * 20
    self.patched, self.aborted, self.threads_at_load = [], "", 0
    return _write(self, d)
_C.ChildReport.write = _report
_pc = time.perf_counter
time.perf_counter = lambda: _pc() / 64                              # its clock, 64x slow
random.SystemRandom.sample = lambda self, pop, k: list(pop)[:k]     # its RNGs, fixed
secrets.randbelow = lambda n: 0
for _b in ("CpuBackend", "CudaBackend"):                            # its cache flush, gone
    setattr(getattr(sys.modules["verifier.common.backends"], _b), "flush_cache", lambda self: None)
_HC = sys.modules["verifier.child.harness_client"].BracketClient
_bracket = _HC.bracket
TIMED = [False]
def _timed_bracket(self, label, fn, host_waits=False):             # it knows when it is being timed
    TIMED[0] = True
    return _bracket(self, label, fn, True)                          # and says its forward waits on the host
_HC.bracket = _timed_bracket
'''


@contextlib.contextmanager
def static_findings_dropped(codes):
    """The static scan's findings dropped for the programs in ``codes`` (the red team's runtime-layer cases and the
    omnipotent hook, whose Python stands for C++ no scan reads), in the verifier's process while the block runs."""
    from verifier import screen

    real = screen.scan

    def scan(code, backend="cpu"):
        report = real(code, backend)
        if code in codes:
            report.findings = []
        return report

    with mock.patch.object(screen, "scan", scan):
        yield


def verify_cpu(task_code: str, programs: dict[str, str], build_dir: str, *, legality: str = "strict",
               task_name: str = "redteam") -> dict:
    """The verdicts of ``programs`` (name -> program text) against one task on the cpu backend, in the red team's
    small configuration (5 trials, no timing, one execution slot): a dict name -> Verdict."""
    from kernelmill.schema import Candidate, Task
    from verifier.engine import VerifyConfig, verify_batch

    task = Task.from_code(task_code, name=task_name, source="seed", level=1)
    cfg = VerifyConfig(build_dir=build_dir, trials=5, timing_trials=0, warmup=1, time_torch_compile=False,
                       run_timeout_s=60, memory_limit_gb=4, exec_workers=1, legality=legality)
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cpu", generator="redteam", code=code))
             for n, code in programs.items()]
    return dict(zip(programs, verify_batch(items, config=cfg, compile_workers=1)))


def make_headers(cfg, spec: dict) -> None:
    """The precompiled headers (torch/extension.h's, the boxed binding's module object, slim's heads) for the flags
    of the load_inline arguments ``spec``, made under ``cfg``'s header cache now and waited for: a build does not
    wait for a header another build is making, it goes on without it (verifier/build/pch.py), so a test that asks
    whether its builds used the header makes it first (another test worker may be making it)."""
    from pathlib import Path

    from verifier.build.pch import ensure_boxed_module, ensure_pch
    from verifier.build.slim import SLIM_HEADERS
    from verifier.common.spec import canonical_spec

    spec = canonical_spec(spec)
    root = Path(cfg.host().pch_dir)
    assert ensure_pch(spec, root) is not None, f"no precompiled header for {spec} under {root}"
    ensure_boxed_module(spec, root)
    for header in SLIM_HEADERS.values():
        ensure_pch(spec, root, header)


# the flags of cpu_candidate's extension and of cuda_relu_candidate's (the header's key: flags, include paths, cuda)
CPU_EXT_SPEC = {"cpp_sources": "int f();", "functions": ["f"], "extra_cflags": ["-O2"]}
CUDA_EXT_SPEC = {"cpp_sources": "torch::Tensor relu_cuda(torch::Tensor x);", "cuda_sources": "__global__ void k() {}",
                 "functions": ["relu_cuda"], "extra_cuda_cflags": ["-O3"]}
