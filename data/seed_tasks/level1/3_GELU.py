import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """GELU activation (tanh approximation)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")


def get_inputs():
    return [torch.randn(128, 8192)]


def get_init_inputs():
    return []
