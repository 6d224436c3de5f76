# task: layernorm_lastdim
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

THREADS = 512
FUNCTIONS = ["ln_forward"]

_header = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
"""

_kernel = """
template <int THREADS>
__global__ void ln_kernel(const float* __restrict__ x, const float* __restrict__ g, const float* __restrict__ b,
                          float* __restrict__ y, int H, float eps) {
    __shared__ float red[2][THREADS / 32];
    const float* xr = x + (size_t)blockIdx.x * H;
    float s = 0.f, ss = 0.f;
    for (int i = threadIdx.x; i < H; i += THREADS) { float v = xr[i]; s += v; ss += v * v; }
    #pragma unroll
    for (int o = 16; o; o >>= 1) { s += __shfl_xor_sync(~0u, s, o); ss += __shfl_xor_sync(~0u, ss, o); }
    if ((threadIdx.x & 31) == 0) { red[0][threadIdx.x / 32] = s; red[1][threadIdx.x / 32] = ss; }
    __syncthreads();
    s = 0.f; ss = 0.f;
    #pragma unroll
    for (int w = 0; w < THREADS / 32; ++w) { s += red[0][w]; ss += red[1][w]; }
    const float mean = s / H;
    const float rstd = rsqrtf(fmaxf(ss / H - mean * mean, 0.f) + eps);
    float* yr = y + (size_t)blockIdx.x * H;
    for (int i = threadIdx.x; i < H; i += THREADS) yr[i] = (xr[i] - mean) * rstd * g[i] + b[i];
}
"""

_host = """
torch::Tensor ln_forward(torch::Tensor x, torch::Tensor g, torch::Tensor b, double eps) {{
    const int H = g.numel();
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    ln_kernel<{threads}><<<xc.numel() / H, {threads}, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), g.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), H, (float)eps);
    return y;
}}
""".format(threads=THREADS)

cuda_sources = "\n".join([_header, _kernel, _host])
cpp_sources = "\n".join(f"torch::Tensor {fn}(torch::Tensor x, torch::Tensor g, torch::Tensor b, double eps);"
                        for fn in FUNCTIONS)

ln = load_inline(name=f"ln_sumsq_t{THREADS}", cpp_sources=cpp_sources, cuda_sources=cuda_sources,
                 functions=FUNCTIONS, verbose=False)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.eps = eps

    def forward(self, x):
        return ln.ln_forward(x, self.weight, self.bias, self.eps)
