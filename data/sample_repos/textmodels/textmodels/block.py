import torch.nn as nn

from .attention import MultiHeadSelfAttention
from .ffn import FeedForward
from .norms import RMSNorm


class TransformerBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm1 = RMSNorm(config.d_model, config.norm_eps)
        self.attn = MultiHeadSelfAttention(config)
        self.norm2 = RMSNorm(config.d_model, config.norm_eps)
        self.ffn = FeedForward(config)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))
