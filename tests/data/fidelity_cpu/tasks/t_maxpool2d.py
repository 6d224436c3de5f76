import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.maxpool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride, padding=padding)
    def forward(self, x):
        return self.maxpool(x)

batch_size = 8
channels = 16
height = 32
width = 32
kernel_size = 3
stride = 2
padding = 1

def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]

def get_init_inputs():
    return [kernel_size, stride, padding]
