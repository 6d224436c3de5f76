# task: softmax
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

softmax_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cfloat>

#define WARP_SIZE 32

__inline__ __device__ float warp_reduce_max(float val) {
    #pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1)
        val = fmaxf(val, __shfl_xor_sync(0xffffffff, val, offset));
    return val;
}

__inline__ __device__ float warp_reduce_sum(float val) {
    #pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1)
        val += __shfl_xor_sync(0xffffffff, val, offset);
    return val;
}

template <int BLOCK_THREADS>
__global__ void __launch_bounds__(BLOCK_THREADS) softmax_rows_kernel(const float* __restrict__ input,
                                                                    float* __restrict__ output, int cols) {
    __shared__ float smem[BLOCK_THREADS / WARP_SIZE];
    const int row = blockIdx.x;
    const float* x = input + (size_t)row * cols;
    float* y = output + (size_t)row * cols;
    const int lane = threadIdx.x % WARP_SIZE;
    const int wid = threadIdx.x / WARP_SIZE;

    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < cols; c += BLOCK_THREADS) m = fmaxf(m, x[c]);
    m = warp_reduce_max(m);
    if (lane == 0) smem[wid] = m;
    __syncthreads();
    if (wid == 0) {
        m = lane < BLOCK_THREADS / WARP_SIZE ? smem[lane] : -FLT_MAX;
        m = warp_reduce_max(m);
        if (lane == 0) smem[0] = m;
    }
    __syncthreads();
    const float row_max = smem[0];
    __syncthreads();

    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += BLOCK_THREADS) s += __expf(x[c] - row_max);
    s = warp_reduce_sum(s);
    if (lane == 0) smem[wid] = s;
    __syncthreads();
    if (wid == 0) {
        s = lane < BLOCK_THREADS / WARP_SIZE ? smem[lane] : 0.f;
        s = warp_reduce_sum(s);
        if (lane == 0) smem[0] = s;
    }
    __syncthreads();
    const float inv = 1.f / smem[0];
    for (int c = threadIdx.x; c < cols; c += BLOCK_THREADS) y[c] = __expf(x[c] - row_max) * inv;
}

torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "input must be CUDA");
    TORCH_CHECK(x.dim() == 2, "input must be 2D");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const int rows = xc.size(0), cols = xc.size(1);
    auto stream = at::cuda::getCurrentCUDAStream();
    softmax_rows_kernel<1024><<<rows, 1024, 0, stream>>>(xc.data_ptr<float>(), out.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

softmax_cpp = "torch::Tensor softmax_forward(torch::Tensor x);"

softmax_module = load_inline(
    name="softmax_warp_shuffle",
    cpp_sources=softmax_cpp,
    cuda_sources=softmax_cuda,
    functions=["softmax_forward"],
    verbose=False,
    extra_cuda_cflags=["-O3", "--use_fast_math", "-lineinfo"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_module.softmax_forward(x)
