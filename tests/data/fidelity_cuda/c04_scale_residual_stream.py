# task: scale_residual
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cstdint>

__device__ __forceinline__ float sigmoidf_fast(float v) { return 1.0f / (1.0f + __expf(-v)); }

__global__ void fused_axpby_gate(const float4* __restrict__ x, const float4* __restrict__ y,
                                 const float4* __restrict__ z, float4* __restrict__ out,
                                 float alpha, float beta, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 a = x[i], b = y[i], c = z[i], r;
    r.x = (alpha * a.x + beta * b.x) * sigmoidf_fast(c.x);
    r.y = (alpha * a.y + beta * b.y) * sigmoidf_fast(c.y);
    r.z = (alpha * a.z + beta * b.z) * sigmoidf_fast(c.z);
    r.w = (alpha * a.w + beta * b.w) * sigmoidf_fast(c.w);
    out[i] = r;
}

__global__ void fused_axpby_gate_scalar(const float* x, const float* y, const float* z, float* out,
                                        float alpha, float beta, int start, int n) {
    int i = start + blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (alpha * x[i] + beta * y[i]) * sigmoidf_fast(z[i]);
}

void launch_fused(torch::Tensor x, torch::Tensor y, torch::Tensor z, torch::Tensor out,
                  double alpha, double beta, int64_t stream_ptr) {
    cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_ptr);
    int n = static_cast<int>(x.numel());
    int n4 = n / 4;
    int threads = 256;
    if (n4 > 0) {
        fused_axpby_gate<<<(n4 + threads - 1) / threads, threads, 0, stream>>>(
            (const float4*)x.data_ptr<float>(), (const float4*)y.data_ptr<float>(),
            (const float4*)z.data_ptr<float>(), (float4*)out.data_ptr<float>(), (float)alpha, (float)beta, n4);
    }
    if (n % 4) {
        fused_axpby_gate_scalar<<<1, 4, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), z.data_ptr<float>(),
                                                     out.data_ptr<float>(), (float)alpha, (float)beta, n4 * 4, n);
    }
}
"""

cpp = "void launch_fused(torch::Tensor x, torch::Tensor y, torch::Tensor z, torch::Tensor out, double alpha, double beta, int64_t stream_ptr);"

fused = load_inline(name="fused_axpby_gate_ext", cpp_sources=cpp, cuda_sources=source,
                    functions=["launch_fused"], extra_cuda_cflags=["-O3", "--use_fast_math"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, alpha: float, beta: float):
        super().__init__()
        self.alpha = float(alpha)
        self.beta = float(beta)

    def forward(self, x, y, z):
        x, y, z = x.contiguous(), y.contiguous(), z.contiguous()
        out = torch.empty_like(x)
        stream = torch.cuda.current_stream().cuda_stream
        fused.launch_fused(x, y, z, out, self.alpha, self.beta, stream)
        return out
