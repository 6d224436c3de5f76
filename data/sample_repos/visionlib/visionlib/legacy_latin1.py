# -*- coding: latin-1 -*-
# Auteur: François
import torch.nn as nn


class Identity2(nn.Module):
    def forward(self, x):
        return x
