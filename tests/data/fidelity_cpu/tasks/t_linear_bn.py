import torch
import torch.nn as nn

class Model(nn.Module):
    """Gemm, BatchNorm (training mode batch statistics), ReLU."""
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features)
    def forward(self, x):
        x = self.gemm(x)
        x = self.bn(x)
        return torch.relu(x)

batch_size = 32
in_features = 128
out_features = 64

def get_inputs():
    return [torch.randn(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features]
