# task: conv2d
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# im2col-free direct convolution: each thread computes one output pixel of one output channel,
# the filter of that channel cached in shared memory.
conv_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void conv2d_nchw_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                   int C, int H, int W, int K, int R, int S, int OH, int OW, int stride, int pad) {
    extern __shared__ float wsh[];
    const int k = blockIdx.y, n = blockIdx.z;
    for (int i = threadIdx.x; i < C * R * S; i += blockDim.x) wsh[i] = w[(size_t)k * C * R * S + i];
    __syncthreads();
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= OH * OW) return;
    const int oh = p / OW, ow = p % OW;
    float acc = 0.f;
    for (int c = 0; c < C; ++c) {
        const float* xc = x + ((size_t)n * C + c) * H * W;
        for (int r = 0; r < R; ++r) {
            const int ih = oh * stride - pad + r;
            if (ih < 0 || ih >= H) continue;
            for (int s = 0; s < S; ++s) {
                const int iw = ow * stride - pad + s;
                if (iw >= 0 && iw < W) acc += xc[ih * W + iw] * wsh[(c * R + r) * S + s];
            }
        }
    }
    y[(((size_t)n * K + k) * OH + oh) * OW + ow] = acc;
}

torch::Tensor conv2d_nchw(torch::Tensor x, torch::Tensor w, int64_t stride, int64_t pad) {
    const int N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const int K = w.size(0), R = w.size(2), S = w.size(3);
    const int OH = (H + 2 * pad - R) / stride + 1, OW = (W + 2 * pad - S) / stride + 1;
    auto y = torch::empty({N, K, OH, OW}, x.options());
    dim3 grid((OH * OW + 255) / 256, K, N);
    conv2d_nchw_kernel<<<grid, 256, (size_t)C * R * S * sizeof(float), at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), C, H, W, K, R, S, OH, OW, (int)stride, (int)pad);
    return y;
}
"""

conv_ext = load_inline(
    name="conv2d_nchw_direct",
    cpp_sources="torch::Tensor conv2d_nchw(torch::Tensor x, torch::Tensor w, int64_t stride, int64_t pad);",
    cuda_sources=conv_source,
    functions=["conv2d_nchw"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Conv2d):
    """nn.Conv2d's parameters and initialisation, our kernel for the forward pass."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 bias: bool = False):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return conv_ext.conv2d_nchw(x.contiguous(), self.weight.contiguous(), self.stride[0], self.padding[0])
