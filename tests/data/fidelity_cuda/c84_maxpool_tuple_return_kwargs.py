# task: maxpool2d
import math
import operator

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

pool_decl = r"""
#include <torch/extension.h>
#include <tuple>

std::tuple<torch::Tensor, torch::Tensor> maxpool2d_forward(const torch::Tensor& x, int64_t kernel_size, int64_t stride,
                                                           int64_t padding, int64_t dilation, int64_t out_h,
                                                           int64_t out_w, bool return_indices);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("maxpool2d_forward", &maxpool2d_forward, "MaxPool2d forward with optional argmax indices",
          py::arg("x"), py::arg("kernel_size"), py::arg("stride"), py::arg("padding"), py::arg("dilation"),
          py::arg("out_h"), py::arg("out_w"), py::arg("return_indices") = false);
    m.attr("SUPPORTS_DILATION") = true;
}
"""

pool_cuda = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda/std/limits>
#include <tuple>

template <typename scalar_t, bool kIndices>
__global__ void maxpool2d_nchw_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t* __restrict__ idx,
                                      int planes, int H, int W, int OH, int OW, int k, int s, int p, int d) {
    const int64_t total = (int64_t)planes * OH * OW;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        const int ow = o % OW, oh = (o / OW) % OH;
        const int64_t plane = o / ((int64_t)OH * OW);
        const scalar_t* src = x + plane * H * W;
        float best = -cuda::std::numeric_limits<float>::infinity();
        int64_t best_at = -1;
        const int h0 = oh * s - p, w0 = ow * s - p;
        for (int i = 0; i < k; ++i) {
            const int h = h0 + i * d;
            if (h < 0 || h >= H) continue;
            for (int j = 0; j < k; ++j) {
                const int w = w0 + j * d;
                if (w < 0 || w >= W) continue;
                const float v = static_cast<float>(src[h * W + w]);
                if (v > best || isnan(v) || best_at < 0) { best = v; best_at = (int64_t)h * W + w; }
                if (isnan(v)) { i = k; break; }
            }
        }
        y[o] = static_cast<scalar_t>(best);
        if constexpr (kIndices) idx[o] = best_at;
    }
}

std::tuple<torch::Tensor, torch::Tensor> maxpool2d_forward(const torch::Tensor& x, int64_t kernel_size, int64_t stride,
                                                           int64_t padding, int64_t dilation, int64_t out_h,
                                                           int64_t out_w, bool return_indices) {
    TORCH_CHECK(x.is_cuda() && x.dim() == 4, "maxpool2d_forward: 4D CUDA tensor expected");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "maxpool2d_forward: float32 expected");
    const c10::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    const int64_t N = xc.size(0), C = xc.size(1), H = xc.size(2), W = xc.size(3);
    auto y = torch::empty({N, C, out_h, out_w}, xc.options());
    auto idx = return_indices ? torch::empty({N, C, out_h, out_w}, xc.options().dtype(torch::kLong)) : torch::Tensor();
    const int64_t total = y.numel();
    if (total == 0) return std::make_tuple(y, idx);
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((total + threads - 1) / threads, 1 << 16);
    auto stream = at::cuda::getCurrentCUDAStream();
    if (return_indices) {
        maxpool2d_nchw_kernel<float, true><<<blocks, threads, 0, stream>>>(
            xc.data_ptr<float>(), y.data_ptr<float>(), idx.data_ptr<int64_t>(), (int)(N * C), (int)H, (int)W,
            (int)out_h, (int)out_w, (int)kernel_size, (int)stride, (int)padding, (int)dilation);
    } else {
        maxpool2d_nchw_kernel<float, false><<<blocks, threads, 0, stream>>>(
            xc.data_ptr<float>(), y.data_ptr<float>(), nullptr, (int)(N * C), (int)H, (int)W, (int)out_h, (int)out_w,
            (int)kernel_size, (int)stride, (int)padding, (int)dilation);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return std::make_tuple(y, idx);
}
"""

pool_ext = load_inline(
    name="maxpool2d_tuple_kwargs",
    cpp_sources=pool_decl,
    cuda_sources=pool_cuda,
    extra_cuda_cflags=["-O3"],
)


def _out_size(size: int, k: int, s: int, p: int, d: int) -> int:
    return math.floor((size + 2 * p - d * (k - 1) - 1) / s) + 1


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int, dilation: int):
        super().__init__()
        self.kernel_size = operator.index(kernel_size)
        self.stride = operator.index(stride) if stride is not None else self.kernel_size
        self.padding = operator.index(padding)
        self.dilation = operator.index(dilation)
        assert pool_ext.SUPPORTS_DILATION or self.dilation == 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, s, p, d = self.kernel_size, self.stride, self.padding, self.dilation
        out_h = _out_size(x.shape[-2], k, s, p, d)
        out_w = _out_size(x.shape[-1], k, s, p, d)
        y, _ = pool_ext.maxpool2d_forward(x, kernel_size=k, stride=s, padding=p, dilation=d, out_h=out_h,
                                          out_w=out_w, return_indices=False)
        return y
