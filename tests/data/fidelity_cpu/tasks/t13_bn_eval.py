import torch
import torch.nn as nn

class Model(nn.Module):
    """Inference-mode BatchNorm2d (running statistics) followed by ReLU."""
    def __init__(self, num_features):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.2, 0.2)
        self.bn.eval()
    def forward(self, x):
        return torch.relu(self.bn(x))

batch_size = 8
num_features = 24
height = 20
width = 28

def get_inputs():
    return [torch.randn(batch_size, num_features, height, width)]

def get_init_inputs():
    return [num_features]
