"""Residual blocks built from visionlib.layers."""
import torch
from torch import nn

from .layers import ConvBNAct, SqueezeExcite as SE


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = ConvBNAct(channels, channels)
        self.conv2 = ConvBNAct(channels, channels, act="silu")

    def forward(self, x):
        return x + self.conv2(self.conv1(x))


class MBConv(nn.Module):
    """Inverted residual with squeeze-excite (EfficientNet)."""

    def __init__(self, in_ch, out_ch, expand_ratio=4, stride=1):
        super().__init__()
        mid = in_ch * expand_ratio
        self.use_residual = in_ch == out_ch and stride == 1
        self.expand = ConvBNAct(in_ch, mid, kernel_size=1, act="silu")
        self.dw = nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False)
        self.se = SE(mid)
        self.project = nn.Sequential(nn.Conv2d(mid, out_ch, 1, bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x):
        y = self.project(self.se(self.dw(self.expand(x))))
        return x + y if self.use_residual else y


class Downsample(nn.Sequential):
    def __init__(self, in_ch, out_ch):
        super().__init__(nn.AvgPool2d(2), nn.Conv2d(in_ch, out_ch, 1))


class SpatialAttention(nn.Module):
    def __init__(self, kernel_size=7):
        super().__init__()
        self.conv = nn.Conv2d(2, 1, kernel_size, padding=kernel_size // 2, bias=False)

    def forward(self, x):
        avg = torch.mean(x, dim=1, keepdim=True)
        mx, _ = torch.max(x, dim=1, keepdim=True)
        return x * torch.sigmoid(self.conv(torch.cat([avg, mx], dim=1)))
