import torch
import torch.nn as nn


class Model(nn.Module):
    """Standard 2D convolution, stride 2, no padding."""
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 2):
        super(Model, self).__init__()
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2d(x)


batch_size = 4
in_channels = 3
out_channels = 8
kernel_size = 3
height = 64
width = 48


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
