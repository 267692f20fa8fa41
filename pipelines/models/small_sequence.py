"""Two small sequence models for backend comparisons: a transformer encoder and an LSTM, each taking
float features (batch, time, width) and returning one tensor, random weights (placement and latency depend
on the architecture, not the values)."""

from __future__ import annotations

import torch
from torch import nn


class SmallEncoder(nn.Module):
    """Two pre-norm transformer encoder layers of width 128, four heads, then a linear head per step."""

    def __init__(self, width: int = 128, heads: int = 4, layers: int = 2, classes: int = 10) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, classes)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(features))


class SmallLSTM(nn.Module):
    """A two-layer LSTM of width 128 and a linear head on its last step."""

    def __init__(self, width: int = 64, hidden: int = 128, classes: int = 10) -> None:
        super().__init__()
        self.lstm = nn.LSTM(width, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(features)
        return self.head(out[:, -1])
