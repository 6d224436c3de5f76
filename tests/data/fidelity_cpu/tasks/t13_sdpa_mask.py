import torch
import torch.nn as nn

class Model(nn.Module):
    """Scaled dot-product attention with a boolean key-padding mask (True = keep)."""
    def __init__(self, scale):
        super().__init__()
        self.scale = scale
    def forward(self, q, k, v, key_mask):
        s = torch.bmm(q, k.transpose(1, 2)) * self.scale     # (B, Lq, Lk)
        s = s.masked_fill(~key_mask[:, None, :], float("-inf"))
        p = torch.softmax(s, dim=-1)
        return torch.bmm(p, v)

batch_size = 8
q_len = 64
k_len = 96
head_dim = 32

def get_inputs():
    q = torch.randn(batch_size, q_len, head_dim)
    k = torch.randn(batch_size, k_len, head_dim)
    v = torch.randn(batch_size, k_len, head_dim)
    key_mask = torch.rand(batch_size, k_len) > 0.25
    key_mask[:, 0] = True
    return [q, k, v, key_mask]

def get_init_inputs():
    return [32 ** -0.5]
