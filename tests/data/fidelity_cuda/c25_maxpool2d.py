# task: maxpool2d
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

maxpool_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <limits>

template <int KS>
__global__ void maxpool2d_kernel(const float* __restrict__ in, float* __restrict__ out, int NC, int H, int W,
                                 int OH, int OW, int stride, int pad, int dil) {
    int ox = blockIdx.x * blockDim.x + threadIdx.x;
    int oy = blockIdx.y * blockDim.y + threadIdx.y;
    int nc = blockIdx.z;
    if (ox >= OW || oy >= OH) return;
    const float* p = in + (size_t)nc * H * W;
    float m = -std::numeric_limits<float>::infinity();
    #pragma unroll
    for (int ky = 0; ky < KS; ++ky) {
        int iy = oy * stride - pad + ky * dil;
        if (iy < 0 || iy >= H) continue;
        #pragma unroll
        for (int kx = 0; kx < KS; ++kx) {
            int ix = ox * stride - pad + kx * dil;
            if (ix < 0 || ix >= W) continue;
            m = fmaxf(m, p[iy * W + ix]);
        }
    }
    out[((size_t)nc * OH + oy) * OW + ox] = m;
}

torch::Tensor maxpool2d_forward(torch::Tensor x, int64_t kernel_size, int64_t stride, int64_t padding,
                                int64_t dilation) {
    TORCH_CHECK(kernel_size == 4, "compiled for kernel_size 4");
    const int N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const int OH = (H + 2 * padding - dilation * (kernel_size - 1) - 1) / stride + 1;
    const int OW = (W + 2 * padding - dilation * (kernel_size - 1) - 1) / stride + 1;
    auto out = torch::empty({N, C, OH, OW}, x.options());
    dim3 block(32, 8);
    dim3 grid((OW + 31) / 32, (OH + 7) / 8, N * C);
    maxpool2d_kernel<4><<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), out.data_ptr<float>(), N * C, H, W, OH, OW, stride, padding, dilation);
    return out;
}
"""

maxpool = load_inline(
    name="maxpool2d_k4",
    cpp_sources="torch::Tensor maxpool2d_forward(torch::Tensor x, int64_t kernel_size, int64_t stride, int64_t padding, int64_t dilation);",
    cuda_sources=maxpool_src,
    functions=["maxpool2d_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int, dilation: int):
        super(ModelNew, self).__init__()
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return maxpool.maxpool2d_forward(x.contiguous(), self.kernel_size, self.stride, self.padding, self.dilation)
