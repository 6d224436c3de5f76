import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))

batch_size = 32
dim = 128
hidden = 256

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return [dim, hidden]
