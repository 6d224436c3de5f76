# task: softmax
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

softmax_cu = r"""
#include <cuda_runtime.h>
#include <cstdint>

constexpr int kThreads = 1024;

__global__ void __launch_bounds__(kThreads) softmax_row_smem(const float* __restrict__ x, float* __restrict__ y,
                                                             int cols) {
    extern __shared__ float row[];
    __shared__ float red[32];
    const float* xr = x + (size_t)blockIdx.x * cols;
    float* yr = y + (size_t)blockIdx.x * cols;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < cols; i += kThreads) { row[i] = xr[i]; m = fmaxf(m, row[i]); }
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) red[wid] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, red[w]);
    __syncthreads();
    float s = 0.f;
    for (int i = threadIdx.x; i < cols; i += kThreads) { float e = __expf(row[i] - m); row[i] = e; s += e; }
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) red[wid] = s;
    __syncthreads();
    s = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) s += red[w];
    const float inv = 1.f / s;
    for (int i = threadIdx.x; i < cols; i += kThreads) yr[i] = row[i] * inv;
}

namespace {
std::mutex g_mutex;
std::unordered_map<int, int> g_smem_limit;  // device -> opt-in shared memory per block
std::once_flag g_attr_once;
}

static int smem_limit(int device) {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_smem_limit.find(device);
    if (it != g_smem_limit.end()) return it->second;
    int v = 0;
    cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    g_smem_limit.emplace(device, v);
    return v;
}

int softmax_launch(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    int device = 0;
    cudaGetDevice(&device);
    const size_t smem = (size_t)cols * sizeof(float);
    if ((int)smem > smem_limit(device)) return -1;
    std::call_once(g_attr_once, [&] {
        cudaFuncSetAttribute(softmax_row_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_limit(device));
    });
    softmax_row_smem<<<rows, kThreads, smem, stream>>>(x, y, cols);
    return (int)cudaGetLastError();
}
"""

softmax_cpp = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

int softmax_launch(const float* x, float* y, int rows, int cols, cudaStream_t stream);

torch::Tensor softmax_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && x.scalar_type() == torch::kFloat32, "2-D float32 CUDA input");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int rc = softmax_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.size(0), xc.size(1),
                            at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(rc == 0, "softmax_launch failed (", rc, "): row too long for shared memory or launch error");
    return y;
}
"""

softmax_mod = load_inline(name="softmax_bare_once", cpp_sources=softmax_cpp, cuda_sources=softmax_cu,
                          functions=["softmax_forward"], extra_cuda_cflags=["-O3", "--use_fast_math"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return softmax_mod.softmax_forward(x)
