import torch
import torch.nn as nn

class Model(nn.Module):
    """Embedding lookup followed by mean over the sequence and a Linear projection."""
    def __init__(self, num_embeddings, embedding_dim, out_features):
        super().__init__()
        self.emb = nn.Embedding(num_embeddings, embedding_dim)
        self.proj = nn.Linear(embedding_dim, out_features)
    def forward(self, idx):
        e = self.emb(idx)          # (B, L, D)
        return self.proj(e.mean(dim=1))

batch_size = 16
seq_len = 40
num_embeddings = 1000
embedding_dim = 64
out_features = 32

def get_inputs():
    return [torch.randint(0, num_embeddings, (batch_size, seq_len))]

def get_init_inputs():
    return [num_embeddings, embedding_dim, out_features]
