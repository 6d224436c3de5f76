"""Heads configured through an argparse-style namespace (args.hidden_size, ...)."""
import torch
import torch.nn as nn


class PoolerHead(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.dense = nn.Linear(args.hidden_size, args.hidden_size)
        self.classifier = nn.Linear(args.hidden_size, args.num_labels)

    def forward(self, hidden_states):
        first = hidden_states[:, 0]
        return self.classifier(torch.tanh(self.dense(first)))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        norm = x.pow(2).mean(-1, keepdim=True).add(self.eps).rsqrt()
        return x * norm * self.weight
