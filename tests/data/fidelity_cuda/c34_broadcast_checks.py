# task: scale_residual
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

kernel_src = r"""
#include <torch/extension.h>

__global__ void axpby_sigmoid_gate_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                          const float* __restrict__ z, float* __restrict__ out,
                                          float alpha, float beta, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = (alpha * x[i] + beta * y[i]) / (1.f + expf(-z[i]));
}

void axpby_sigmoid_gate(torch::Tensor x, torch::Tensor y, torch::Tensor z, torch::Tensor out, double alpha, double beta) {
    long n = out.numel();
    axpby_sigmoid_gate_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), z.data_ptr<float>(),
                                                        out.data_ptr<float>(), (float)alpha, (float)beta, n);
}
"""

gate = load_inline(name="axpby_gate",
                   cpp_sources="void axpby_sigmoid_gate(torch::Tensor x, torch::Tensor y, torch::Tensor z, torch::Tensor out, double alpha, double beta);",
                   cuda_sources=kernel_src, functions=["axpby_sigmoid_gate"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, alpha: float, beta: float):
        super().__init__()
        self.alpha = alpha
        self.beta = beta

    def forward(self, x, y, z):
        if not (x.is_floating_point() and y.is_floating_point() and z.is_floating_point()):
            raise TypeError("floating point inputs expected")
        shape = torch.broadcast_shapes(x.shape, y.shape, z.shape)
        x = x.expand(shape).contiguous()
        y = y.expand(shape).contiguous()
        z = z.expand(shape).contiguous()
        out = torch.empty(shape, device=x.device, dtype=x.dtype)
        gate.axpby_sigmoid_gate(x, y, z, out, self.alpha, self.beta)
        return out
