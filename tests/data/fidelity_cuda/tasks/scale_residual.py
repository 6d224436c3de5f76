import torch
import torch.nn as nn


class Model(nn.Module):
    """out = alpha * x + beta * y, then sigmoid gate by z."""

    def __init__(self, alpha: float, beta: float):
        super().__init__()
        self.alpha = alpha
        self.beta = beta

    def forward(self, x, y, z):
        return (self.alpha * x + self.beta * y) * torch.sigmoid(z)


N = 8192
M = 4096


def get_inputs():
    return [torch.randn(N, M), torch.randn(N, M), torch.randn(N, M)]


def get_init_inputs():
    return [0.5, 2.0]
