import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    """Scale, HardSwish, add a per-channel bias, clamp."""
    def __init__(self, channels, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(channels, 1, 1) * 0.5)
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max
    def forward(self, x):
        x = x * self.scale
        x = F.hardswish(x)
        x = x + self.bias
        x = torch.clamp(x, self.clamp_min, self.clamp_max)
        return x

batch_size = 8
channels = 16
height = 16
width = 16

def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]

def get_init_inputs():
    return [channels, 1.5, -1.0, 2.0]
