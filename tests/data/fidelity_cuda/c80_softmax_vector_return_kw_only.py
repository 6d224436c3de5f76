# task: softmax
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

softmax_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda/std/limits>
#include <vector>

namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ void online_merge(float& m, float& s, float om, float os) {
    const float nm = fmaxf(m, om);
    s = s * __expf(m - nm) + os * __expf(om - nm);
    m = nm;
}

// one block per row: an online (max, sum) pass with float4 loads, warp shuffles then shared memory, then the write
__global__ void __launch_bounds__(kThreads) softmax_online_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                                  float* __restrict__ lse, int cols) {
    __shared__ float s_max[32], s_sum[32];
    const float* row = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    float m = -cuda::std::numeric_limits<float>::infinity(), s = 0.f;
    const bool vec = (cols % 4) == 0;
    if (vec) {
        const float4* row4 = reinterpret_cast<const float4*>(row);
        for (int i = threadIdx.x; i < cols / 4; i += blockDim.x) {
            const float4 v = row4[i];
            const float vm = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
            const float vs = __expf(v.x - vm) + __expf(v.y - vm) + __expf(v.z - vm) + __expf(v.w - vm);
            online_merge(m, s, vm, vs);
        }
    } else {
        for (int i = threadIdx.x; i < cols; i += blockDim.x) online_merge(m, s, row[i], 1.f);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o);
        online_merge(m, s, om, os);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { s_max[warp] = m; s_sum[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        const int nwarps = blockDim.x >> 5;
        m = lane < nwarps ? s_max[lane] : -cuda::std::numeric_limits<float>::infinity();
        s = lane < nwarps ? s_sum[lane] : 0.f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o);
            online_merge(m, s, om, os);
        }
        if (lane == 0) { s_max[0] = m; s_sum[0] = s; }
    }
    __syncthreads();
    const float row_max = s_max[0], inv = 1.f / s_sum[0];
    for (int i = threadIdx.x; i < cols; i += blockDim.x) out[i] = __expf(row[i] - row_max) * inv;
    if (threadIdx.x == 0 && lse != nullptr) lse[blockIdx.x] = row_max + logf(s_sum[0]);
}

}  // namespace

std::vector<torch::Tensor> softmax_fwd(const torch::Tensor& x, bool return_lse) {
    TORCH_CHECK(x.is_cuda(), "softmax_fwd: CUDA tensor expected");
    TORCH_CHECK(x.dim() == 2, "softmax_fwd: 2D input expected");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "softmax_fwd: float32 expected, got ", x.scalar_type());
    const at::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    const int64_t rows = xc.size(0), cols = xc.size(1);
    auto y = torch::empty_like(xc);
    torch::Tensor lse = return_lse ? torch::empty({rows}, xc.options()) : torch::Tensor();
    if (rows > 0) {
        const int threads = cols >= 4096 ? kThreads : 256;
        softmax_online_kernel<<<rows, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
            xc.data_ptr<float>(), y.data_ptr<float>(), return_lse ? lse.data_ptr<float>() : nullptr, (int)cols);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    if (return_lse) return {y, lse};
    return {y};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "row-wise softmax kernels";
    m.def("softmax_fwd", &softmax_fwd, "online softmax over dim 1; optionally the log-sum-exp of each row",
          py::arg("x"), py::kw_only(), py::arg("return_lse") = false,
          py::call_guard<py::gil_scoped_release>());
    m.attr("THREADS") = py::int_(kThreads);
    m.attr("__version__") = "1.2.0";
}
"""

softmax_mod = load_inline(
    name="softmax_online_vec_return",
    cpp_sources="",
    cuda_sources=softmax_src,
    extra_cuda_cflags=["-O3", "--use_fast_math", "-lineinfo"],
    with_cuda=True,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, *_ = softmax_mod.softmax_fwd(x, return_lse=False)
        return out
