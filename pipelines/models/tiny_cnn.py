"""A small convolutional network: the example model for pipelines and tests.

Three conv blocks and a linear head — big enough to have real layers, small enough that a whole
sweep over it takes seconds on a laptop CPU.
"""

from __future__ import annotations

import torch
from torch import nn


class TinyCNN(nn.Module):
    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width * 2, 3, stride=2, padding=1), nn.BatchNorm2d(width * 2), nn.ReLU(),
            nn.Conv2d(width * 2, width * 4, 3, stride=2, padding=1), nn.BatchNorm2d(width * 4), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(width * 4, num_classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(image), 1))
