import torch
import torch.nn as nn

class Model(nn.Module):
    """One LSTM cell step returning (h, c)."""
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.cell = nn.LSTMCell(input_size, hidden_size)
    def forward(self, x, h, c):
        h1, c1 = self.cell(x, (h, c))
        return h1, c1

batch_size = 16
input_size = 64
hidden_size = 80

def get_inputs():
    return [torch.randn(batch_size, input_size), torch.randn(batch_size, hidden_size), torch.randn(batch_size, hidden_size)]

def get_init_inputs():
    return [input_size, hidden_size]
