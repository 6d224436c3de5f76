import torch
import torch.nn as nn

class Model(nn.Module):
    """Masked min over dim 1: returns (values, indices) of min over positions where mask is True.
    Masked-out positions count as +inf."""
    def __init__(self):
        super().__init__()
    def forward(self, x, mask):
        filled = torch.where(mask, x, torch.full_like(x, float("inf")))
        vals, idx = torch.min(filled, dim=1)
        return vals, idx

batch_size = 32
dim1 = 256
dim2 = 48

def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    mask = torch.rand(batch_size, dim1, dim2) > 0.3
    mask[:, 0, :] = True
    return [x, mask]

def get_init_inputs():
    return []
