import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear, then GELU, then multiply by a scalar and add a learned bias vector."""

    def __init__(self, in_features, out_features, scale):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = scale
        self.bias2 = nn.Parameter(torch.randn(out_features) * 0.02)

    def forward(self, x):
        x = self.gemm(x)
        x = torch.nn.functional.gelu(x)
        return x * self.scale + self.bias2


batch_size = 512
in_features = 4096
out_features = 4096
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
