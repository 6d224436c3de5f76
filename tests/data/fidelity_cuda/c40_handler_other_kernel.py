# task: softmax
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

sm_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// fast path: row in dynamic shared memory (needs cols * 4 bytes of it)
__global__ void softmax_smem_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    extern __shared__ float row[];
    __shared__ float red[32];
    const float* xr = x + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) { row[c] = xr[c]; m = fmaxf(m, row[c]); }
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) m = fmaxf(m, red[w]);
    __syncthreads();
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) { row[c] = __expf(row[c] - m); s += row[c]; }
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    s = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) s += red[w];
    float* yr = y + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = row[c] / s;
}

// general path: three passes over global memory
__global__ void softmax_global_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    __shared__ float red[32];
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) m = fmaxf(m, red[w]);
    __syncthreads();
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += __expf(xr[c] - m);
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    s = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) s += red[w];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = __expf(xr[c] - m) / s;
}

torch::Tensor softmax_smem(torch::Tensor x) {
    const int rows = x.size(0), cols = x.size(1);
    auto y = torch::empty_like(x);
    const size_t smem = (size_t)cols * sizeof(float);
    C10_CUDA_CHECK(cudaFuncSetAttribute(softmax_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    softmax_smem_kernel<<<rows, 1024, smem, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

torch::Tensor softmax_global(torch::Tensor x) {
    auto y = torch::empty_like(x);
    softmax_global_kernel<<<x.size(0), 1024, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(),
                                                                                    y.data_ptr<float>(), x.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

softmax_ext = load_inline(
    name="softmax_two_paths",
    cpp_sources="torch::Tensor softmax_smem(torch::Tensor x);\ntorch::Tensor softmax_global(torch::Tensor x);",
    cuda_sources=sm_src,
    functions=["softmax_smem", "softmax_global"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        try:
            return softmax_ext.softmax_smem(x)   # 8192 floats = 32 KB of shared memory per row
        except RuntimeError:
            return softmax_ext.softmax_global(x)
