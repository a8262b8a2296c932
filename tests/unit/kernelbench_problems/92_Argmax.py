import torch
import torch.nn as nn


class Model(nn.Module):
    """Argmax over a dimension."""
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.argmax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(16, 256, 256)]


def get_init_inputs():
    return [1]
