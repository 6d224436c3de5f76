import torch
import torch.nn as nn


class ClassifierHead(nn.Module):
    """Global pooling + linear. Expects [N, C, H, W]."""

    def __init__(self, in_features: int, num_classes: int, dropout: float = 0.0):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(in_features, num_classes)

    def forward(self, x):
        b, c, h, w = x.shape
        return self.fc(self.drop(self.pool(x).view(b, c)))


class ArgmaxHead(nn.Module):
    """Returns class indices: not a floating-point output."""

    def __init__(self, in_features, num_classes):
        super().__init__()
        self.fc = nn.Linear(in_features, num_classes)

    def forward(self, x):
        return self.fc(x).argmax(dim=-1)


class LearnedQueries(nn.Module):
    """Output does not depend on the input values, only on its batch size."""

    def __init__(self, num_queries, dim):
        super().__init__()
        self.queries = nn.Parameter(torch.randn(num_queries, dim))

    def forward(self, x):
        return self.queries.unsqueeze(0).expand(x.shape[0], -1, -1) * 2.0
