# task: softmax
import torch
import torch.nn as nn
from torch._C import _cuda_getCurrentRawStream as get_raw_stream
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

template <int VEC>
struct alignas(sizeof(float) * VEC) VecF { float v[VEC]; };

// online softmax: one pass computes (max, sum) per thread, merged across the block; second pass writes.
template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK) online_softmax(const float* __restrict__ x, float* __restrict__ y, int cols) {
    using V = VecF<VEC>;
    __shared__ float sm_m[BLOCK / 32], sm_s[BLOCK / 32];
    const V* xr = reinterpret_cast<const V*>(x + (size_t)blockIdx.x * cols);
    V* yr = reinterpret_cast<V*>(y + (size_t)blockIdx.x * cols);
    const int nv = cols / VEC;
    float m = -INFINITY, s = 0.f;
    for (int i = threadIdx.x; i < nv; i += BLOCK) {
        V t = xr[i];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            float nm = fmaxf(m, t.v[j]);
            s = s * __expf(m - nm) + __expf(t.v[j] - nm);
            m = nm;
        }
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) {
        float om = __shfl_xor_sync(0xffffffff, m, o), os = __shfl_xor_sync(0xffffffff, s, o);
        float nm = fmaxf(m, om);
        s = (m == -INFINITY ? 0.f : s * __expf(m - nm)) + (om == -INFINITY ? 0.f : os * __expf(om - nm));
        m = nm;
    }
    if ((threadIdx.x & 31) == 0) { sm_m[threadIdx.x >> 5] = m; sm_s[threadIdx.x >> 5] = s; }
    __syncthreads();
    float gm = -INFINITY;
#pragma unroll
    for (int w = 0; w < BLOCK / 32; ++w) gm = fmaxf(gm, sm_m[w]);
    float gs = 0.f;
#pragma unroll
    for (int w = 0; w < BLOCK / 32; ++w) gs += sm_s[w] * __expf(sm_m[w] - gm);
    const float inv = 1.f / gs;
    for (int i = threadIdx.x; i < nv; i += BLOCK) {
        V t = xr[i];
#pragma unroll
        for (int j = 0; j < VEC; ++j) t.v[j] = __expf(t.v[j] - gm) * inv;
        yr[i] = t;
    }
}

void softmax_launch(torch::Tensor x, torch::Tensor y, int64_t stream_handle) {
    const int rows = x.size(0), cols = x.size(1);
    auto stream = reinterpret_cast<cudaStream_t>(stream_handle);
    if (cols % 4 == 0) online_softmax<256, 4><<<rows, 256, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols);
    else online_softmax<256, 1><<<rows, 256, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), cols);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) throw std::runtime_error(cudaGetErrorString(err));
}
"""

softmax_online = load_inline(name="softmax_online_rawstream", cpp_sources="void softmax_launch(torch::Tensor x, torch::Tensor y, int64_t stream_handle);",
                             cuda_sources=src, functions=["softmax_launch"], extra_cuda_cflags=["-O3", "--use_fast_math"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        softmax_online.softmax_launch(x, y, get_raw_stream(x.device.index))
        return y
