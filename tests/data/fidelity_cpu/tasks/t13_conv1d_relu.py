import torch
import torch.nn as nn

class Model(nn.Module):
    """Dilated Conv1d followed by ReLU."""
    def __init__(self, in_channels, out_channels, kernel_size, dilation):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation)
    def forward(self, x):
        return torch.relu(self.conv(x))

batch_size = 8
in_channels = 16
out_channels = 32
length = 200

def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]

def get_init_inputs():
    return [in_channels, out_channels, 5, 2]
