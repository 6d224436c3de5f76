import torch
import torch.nn as nn

class Model(nn.Module):
    """Batched matrix multiplication."""
    def __init__(self):
        super().__init__()
    def forward(self, A, B):
        return torch.bmm(A, B)

batch_size = 8
m = 64
k = 48
n = 80

def get_inputs():
    A = torch.randn(batch_size, m, k)
    B = torch.randn(batch_size, k, n)
    return [A, B]

def get_init_inputs():
    return []
