# task: rmsnorm
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

rms_norm_cuda_source = """
#include <torch/extension.h>
#include <cuda.h>
#include <cuda_runtime.h>

// x: (B, C, S) contiguous, normalised over C for every (b, s): threads walk s (coalesced), loop over C
__global__ void rms_norm_kernel(const float* __restrict__ x, float* __restrict__ out,
                                int batch, int channels, int spatial, float eps) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = batch * spatial;
    if (idx >= total) return;
    int b = idx / spatial;
    int s = idx % spatial;
    const float* base = x + (size_t)b * channels * spatial + s;
    float sumsq = 0.0f;
    for (int c = 0; c < channels; ++c) {
        float v = base[(size_t)c * spatial];
        sumsq += v * v;
    }
    float inv = rsqrtf(sumsq / channels + eps);
    float* obase = out + (size_t)b * channels * spatial + s;
    for (int c = 0; c < channels; ++c) {
        obase[(size_t)c * spatial] = base[(size_t)c * spatial] * inv;
    }
}

torch::Tensor rms_norm_cuda(torch::Tensor x, float eps) {
    auto sizes = x.sizes();
    int batch = sizes[0];
    int channels = sizes[1];
    int spatial = x.numel() / (batch * channels);
    auto out = torch::empty_like(x);
    const int block_size = 256;
    const int num_blocks = (batch * spatial + block_size - 1) / block_size;
    rms_norm_kernel<<<num_blocks, block_size>>>(x.data_ptr<float>(), out.data_ptr<float>(),
                                                batch, channels, spatial, eps);
    return out;
}
"""

rms_norm_cpp_source = "torch::Tensor rms_norm_cuda(torch::Tensor x, float eps);"

rms_norm = load_inline(
    name="rms_norm",
    cpp_sources=rms_norm_cpp_source,
    cuda_sources=rms_norm_cuda_source,
    functions=["rms_norm_cuda"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super(ModelNew, self).__init__()
        self.num_features = num_features
        self.eps = eps
        self.rms_norm = rms_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rms_norm.rms_norm_cuda(x.contiguous(), self.eps)
