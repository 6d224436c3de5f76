"""Convolution layers shared by the blocks."""
import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

BN_MOMENTUM = 0.1
_ACTIVATIONS = {"relu": nn.ReLU, "silu": nn.SiLU, "gelu": nn.GELU}


def make_divisible(v: float, divisor: int = 8, min_value: Optional[int] = None) -> int:
    """Round channel counts to a multiple of divisor (MobileNet style)."""
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def get_act(name: str) -> nn.Module:
    return _ACTIVATIONS[name]()


class ConvBNAct(nn.Module):
    """Conv2d -> BatchNorm2d -> activation."""

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, act="relu"):
        super(ConvBNAct, self).__init__()
        padding = (kernel_size - 1) // 2
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, bias=False)
        self.bn = nn.BatchNorm2d(out_channels, momentum=BN_MOMENTUM)
        self.act = get_act(act)

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, reduction: int = 4):
        super().__init__()
        hidden = make_divisible(channels / reduction)
        self.fc1 = nn.Conv2d(channels, hidden, 1)
        self.fc2 = nn.Conv2d(hidden, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        s = torch.sigmoid(self.fc2(F.relu(self.fc1(s))))
        return x * s


class HardSwish(nn.Module):
    def forward(self, x):
        return x * F.relu6(x + 3.0) / 6.0


class GroupNormAct(nn.GroupNorm):
    """GroupNorm followed by SiLU; inherits GroupNorm's constructor."""

    def forward(self, x):
        return F.silu(super().forward(x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GELUTanh(nn.Module):
    def forward(self, x):
        return gelu_tanh(x)
