import torch
import torch.nn as nn
from apex_fused_kernels import fused_layer_norm  # a package nobody has installed


class FusedLayerNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return fused_layer_norm(x, self.weight)


class PlainScale(nn.Module):
    """Does not use the missing package, so it can still be mined."""

    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, x):
        return x * self.scale
