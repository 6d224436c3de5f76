import torch
import torch.nn as nn

class Model(nn.Module):
    """Linear (GEMM + bias), LeakyReLU(0.1), multiply by a scalar."""
    def __init__(self, in_features, out_features, negative_slope, multiplier):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.negative_slope = negative_slope
        self.multiplier = multiplier
    def forward(self, x):
        x = self.linear(x)
        x = torch.nn.functional.leaky_relu(x, self.negative_slope)
        return x * self.multiplier

batch_size = 64
in_features = 256
out_features = 192

def get_inputs():
    return [torch.randn(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features, 0.1, 2.0]
