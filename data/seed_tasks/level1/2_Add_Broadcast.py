import torch
import torch.nn as nn


class Model(nn.Module):
    """Elementwise add of a matrix and a row vector (broadcast over rows)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


M = 512
N = 2048


def get_inputs():
    return [torch.randn(M, N), torch.randn(N)]


def get_init_inputs():
    return []
