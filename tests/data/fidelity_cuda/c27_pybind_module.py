# task: leaky_relu
import torch
import torch.nn as nn
import torch.utils.cpp_extension

cpp_source = """
#include <torch/extension.h>

torch::Tensor leaky_relu_cuda(torch::Tensor x, float negative_slope);

torch::Tensor leaky_relu(torch::Tensor x, float negative_slope) {
    TORCH_CHECK(x.device().is_cuda(), "x must be a CUDA tensor");
    return leaky_relu_cuda(x.contiguous(), negative_slope);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("leaky_relu", &leaky_relu, "LeakyReLU (CUDA)", py::arg("x"), py::arg("negative_slope") = 0.01f);
}
"""

cuda_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void leaky_relu_kernel(const float* x, float* out, float negative_slope, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        float v = x[idx];
        out[idx] = v >= 0.0f ? v : v * negative_slope;
    }
}

torch::Tensor leaky_relu_cuda(torch::Tensor x, float negative_slope) {
    auto out = torch::empty_like(x);
    int size = x.numel();
    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;
    leaky_relu_kernel<<<num_blocks, block_size>>>(x.data_ptr<float>(), out.data_ptr<float>(), negative_slope, size);
    return out;
}
"""

leaky_relu_module = torch.utils.cpp_extension.load_inline(
    name="leaky_relu_pybind",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super(ModelNew, self).__init__()
        self.negative_slope = negative_slope
        self.leaky_relu = leaky_relu_module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.leaky_relu.leaky_relu(x, self.negative_slope)
