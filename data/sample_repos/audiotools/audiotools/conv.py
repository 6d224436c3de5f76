import torch.nn as nn
import torch.nn.functional as F


class Conv1dStack(nn.Module):
    """Temporal convolutions over [batch, channels, time]."""

    def __init__(self, channels, kernel_size=5, layers=3):
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, padding=kernel_size // 2) for _ in range(layers))

    def forward(self, x):
        for conv in self.convs:
            x = F.leaky_relu(conv(x), 0.1)
        return x
