"""A stack of identical blocks whose cost scales with `blocks`: 21 blocks are 5% slower than 20, and
stay 5% slower whatever else the machine is doing (the extra work is the same kind of work).
Used by benchmarks/ab_noise.py and the `mlbench ab` tests."""

from __future__ import annotations

import torch
from torch import nn


class Stack(nn.Module):
    def __init__(self, blocks: int = 20, width: int = 256) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(blocks)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)
