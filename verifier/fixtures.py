"""Small tasks and candidates for the verifier's own tests and benchmark (torch + stdlib only).

All cpu candidates share ONE C++ source (``SHARED_CPP``) with every function the tests need, honest
and dishonest, so a whole test session builds a single extension (identical sources share a build).
``cuda_relu_candidate(k)`` makes distinct small CUDA candidates for the GPU tests and the benchmark.
"""

from __future__ import annotations

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
torch::Tensor relu_aten(torch::Tensor x) { return at::relu(x); }
void segv(torch::Tensor x) { volatile float* p = nullptr; *p = 1.0f; }
void spin(torch::Tensor x) { volatile int64_t k = 0; while (true) { k = k + 1; } }
torch::Tensor hog(torch::Tensor x) {
    std::vector<float> v((size_t)25000000000ULL); v[0] = 1.f; v[v.size() - 1] = 2.f; return x;
}
'''

SHARED_FUNCS = ["relu", "relu_into", "relu_inplace", "relu_lowp", "relu_fixed_rows", "touch", "matmul",
                "relu_aten", "segv", "spin", "hog"]


def cpu_candidate(forward: str, *, init: str = "", imports: str = "", module: str = "",
                  bases: str = "nn.Module", args: str = "x") -> str:
    """A cpu candidate using the shared extension; ``forward`` is the body of ModelNew.forward."""
    def indent(s: str, n: int) -> str:
        return "\n".join(" " * n + ln if ln.strip() else ln for ln in s.strip("\n").splitlines())

    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
{imports}
CPP = r"""{SHARED_CPP}"""
FUNCS = {SHARED_FUNCS!r}
ext = load_inline(name="shared_ext", cpp_sources=CPP, functions=FUNCS, extra_cflags=["-O2"])
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
