# task: leaky_relu
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Leaky ReLU over float4 packets, a grid-stride loop sized from the SM count; the launch configuration worked out in
# Python with torch's size helpers (torch.sym_int / sym_max / sym_min keep it traceable under torch.compile) and the
# views taken through torch.Tensor's unbound methods, as export-friendly code writes them.
cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

__global__ void leaky_relu_vec4(const float4* __restrict__ x, float4* __restrict__ y, long n4, float slope) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n4; i += (long)gridDim.x * blockDim.x) {
        float4 v = x[i];
        v.x = v.x > 0.f ? v.x : v.x * slope;
        v.y = v.y > 0.f ? v.y : v.y * slope;
        v.z = v.z > 0.f ? v.z : v.z * slope;
        v.w = v.w > 0.f ? v.w : v.w * slope;
        y[i] = v;
    }
}

__global__ void leaky_relu_tail(const float* __restrict__ x, float* __restrict__ y, long start, long n, float slope) {
    long i = start + blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = v > 0.f ? v : v * slope; }
}

torch::Tensor leaky_relu_forward(torch::Tensor x, double slope, int64_t blocks, int64_t threads) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.is_contiguous(), "contiguous float32 CUDA tensor");
    const c10::cuda::CUDAGuard guard(x.device());
    auto y = torch::empty_like(x);
    const long n = x.numel(), n4 = n / 4;
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (n4 > 0)
        leaky_relu_vec4<<<blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()),
                                                        reinterpret_cast<float4*>(y.data_ptr<float>()), n4, (float)slope);
    if (n - n4 * 4 > 0)
        leaky_relu_tail<<<1, 32, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n4 * 4, n, (float)slope);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_src = "torch::Tensor leaky_relu_forward(torch::Tensor x, double slope, int64_t blocks, int64_t threads);"

leaky = load_inline(name="leaky_relu_sym_vec4", cpp_sources=cpp_src, cuda_sources=cuda_src,
                    functions=["leaky_relu_forward"], extra_cuda_cflags=["-O3", "--use_fast_math"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = float(negative_slope)
        self.threads = 256
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        self.max_blocks = props.multi_processor_count * 8

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = torch.Tensor.view(torch.Tensor.contiguous(x), -1)
        n4 = torch.sym_int(torch.Tensor.numel(flat) // 4)
        blocks = torch.sym_max(1, torch.sym_min(self.max_blocks, (n4 + self.threads - 1) // self.threads))
        y = leaky.leaky_relu_forward(flat, self.negative_slope, blocks, self.threads)
        return torch.Tensor.view_as(y, x)
