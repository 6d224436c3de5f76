import torch.nn as nn


class Unfinished(nn.Module):
    def forward(self, x)
        return x +
