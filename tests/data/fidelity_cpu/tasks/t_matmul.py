import torch
import torch.nn as nn

class Model(nn.Module):
    """Simple matrix multiplication C = A @ B."""
    def __init__(self):
        super().__init__()
    def forward(self, A, B):
        return torch.matmul(A, B)

M = 128
K = 512
N = 96

def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]

def get_init_inputs():
    return []
