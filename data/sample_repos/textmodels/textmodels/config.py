from dataclasses import dataclass


@dataclass
class TransformerConfig:
    d_model: int = 64
    n_heads: int = 4
    ffn_mult: int = 4
    dropout: float = 0.0
    max_seq_len: int = 1024
    norm_eps: float = 1e-5
