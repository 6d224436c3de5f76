"""Modules that a miner must count and skip without stopping."""
import time

import torch
import torch.nn as nn


class HangingInit(nn.Module):
    def __init__(self, dim):
        super().__init__()
        while True:  # waits for a device that never comes
            time.sleep(0.05)

    def forward(self, x):
        return x * 2


class HugeBuffer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer("table", torch.zeros(1 << 36))

    def forward(self, x):
        return x + self.table[: x.shape[-1]]


class NoisyHead(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(x) + 0.01 * torch.rand(x.shape)


class LoggingLayer(nn.Module):
    def __init__(self, dim, log_path="activations.log"):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.log_path = log_path

    def forward(self, x):
        y = self.proj(x)
        with open(self.log_path, "a") as f:
            f.write(f"{float(y.mean())}\n")
        return y


class CallCounter(nn.Module):
    """Stateful forward: two calls on the same input disagree."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.calls
