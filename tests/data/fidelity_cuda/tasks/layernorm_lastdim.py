import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x):
        return self.ln(x)


batch = 32
seq = 512
hidden = 4096


def get_inputs():
    return [torch.randn(batch, seq, hidden)]


def get_init_inputs():
    return [hidden]
