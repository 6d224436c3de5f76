import torch
import torch.nn as nn

class Model(nn.Module):
    """Max reduction over a dimension."""
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
    def forward(self, x):
        return torch.max(x, dim=self.dim)[0]

batch_size = 16
dim1 = 128
dim2 = 96

def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]

def get_init_inputs():
    return [1]
