import torch
import torch.nn as nn

class Model(nn.Module):
    """Three-layer MLP with Tanh activations."""
    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, out_features),
        )
    def forward(self, x):
        return self.net(x)

batch_size = 32
in_features = 128
hidden = 96
out_features = 16

def get_inputs():
    return [torch.randn(batch_size, in_features)]

def get_init_inputs():
    return [in_features, hidden, out_features]
