import torch
import torch.nn as nn

class Model(nn.Module):
    """Integer arithmetic: returns ((a * b + 7) mod 97) as int64 and a bool mask (a > b)."""
    def __init__(self):
        super().__init__()
    def forward(self, a, b):
        r = torch.remainder(a * b + 7, 97)
        return r, a > b

batch_size = 64
n = 1024

def get_inputs():
    return [torch.randint(-1000, 1000, (batch_size, n)), torch.randint(-1000, 1000, (batch_size, n))]

def get_init_inputs():
    return []
