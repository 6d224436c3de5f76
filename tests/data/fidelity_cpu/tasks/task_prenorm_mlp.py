import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    """Pre-norm transformer MLP block."""
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
    def forward(self, x):
        h = self.norm(x)
        h = F.gelu(self.fc1(h))
        return x + self.fc2(h)

batch_size = 4
seq_len = 32
d_model = 128
d_ff = 512

def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]

def get_init_inputs():
    return [d_model, d_ff]
