import math
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, q, k, v):
        d = q.size(-1)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d)
        attn = torch.softmax(scores, dim=-1)
        return torch.matmul(attn, v)

batch_size = 2
heads = 4
seq_len = 64
head_dim = 32

def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, head_dim),
            torch.randn(batch_size, heads, seq_len, head_dim),
            torch.randn(batch_size, heads, seq_len, head_dim)]

def get_init_inputs():
    return []
