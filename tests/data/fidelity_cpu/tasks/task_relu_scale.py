import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
    def forward(self, x):
        return torch.relu(x) * self.scale

batch_size = 16
dim = 8192
scale = 1.5

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return [scale]
