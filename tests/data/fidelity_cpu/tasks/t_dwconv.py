import torch
import torch.nn as nn

class Model(nn.Module):
    """Depthwise 2D convolution."""
    def __init__(self, in_channels: int, kernel_size: int, padding: int = 0, bias: bool = True):
        super().__init__()
        self.conv2d = nn.Conv2d(in_channels, in_channels, kernel_size, padding=padding, groups=in_channels, bias=bias)
    def forward(self, x):
        return self.conv2d(x)

batch_size = 4
in_channels = 32
height = 32
width = 32
kernel_size = 3
padding = 1

def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, kernel_size, padding]
