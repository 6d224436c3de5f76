import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim
    def forward(self, x):
        return torch.log_softmax(x, dim=self.dim)

batch_size = 32
dim = 2048

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
