import torch
import torch.nn as nn

class Model(nn.Module):
    """2D average pooling, kernel 3, stride 2, padding 1 (count_include_pad=True)."""
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size, stride=stride, padding=padding)
    def forward(self, x):
        return self.pool(x)

batch_size = 8
channels = 16
height = 33
width = 40

def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]

def get_init_inputs():
    return [3, 2, 1]
