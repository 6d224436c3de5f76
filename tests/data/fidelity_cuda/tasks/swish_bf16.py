import torch
import torch.nn as nn

ATOL = 1e-2
RTOL = 1e-2


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)


batch_size = 4096
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
