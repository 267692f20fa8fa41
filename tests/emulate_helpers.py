"""Shared helpers for the interpreter's tests: small real torch models, exports, error measure.

This is the one place that imports mlbench's exporter: it may move while the package is
restructured; fix the import here only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mlbench.backends.coreml.export import export_coreml  # the one import path of the exporter

__all__ = ["MODELS", "eager", "export", "export_coreml", "max_rel"]


def max_rel(reference, actual) -> float:
    """max|a - b| / max(max|reference|, 1) over all outputs (mlbench.verify's measure)."""
    worst = 0.0
    for ref, got in zip(reference, actual):
        ref = np.asarray(ref, dtype=np.float64)
        got = np.asarray(got, dtype=np.float64).reshape(ref.shape)
        err = float(np.max(np.abs(got - ref)))
        worst = max(worst, err / max(float(np.max(np.abs(ref))), 1.0))
    return worst


def eager(model: nn.Module, inputs: list[torch.Tensor]) -> list[np.ndarray]:
    with torch.no_grad():
        out = model(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.numpy() for o in outs]


def export(model: nn.Module, inputs: list[torch.Tensor], names: list[str], dest: Path, *,
           precision: str = "float32", optimization: dict | None = None,
           deployment_target: str | None = None) -> Path:
    result = export_coreml(model.eval(), inputs, names, precision=precision, optimization=optimization,
                           deployment_target=deployment_target, dest=dest)
    return result.artifact


# ------------------------------------------------------------------ small models


class SmallCNN(nn.Module):
    """conv + batch_norm + relu/relu6/hardswish, max/avg pooling, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
        self.bn2 = nn.BatchNorm2d(16)
        self.conv3 = nn.Conv2d(16, 16, 1)
        self.head = nn.Linear(16, 10)
        for bn in (self.bn1, self.bn2):  # non-trivial running statistics
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 1.5)

    def forward(self, image):
        x = F.relu(self.bn1(self.conv1(image)))
        x = F.max_pool2d(x, 2)
        x = F.relu6(self.bn2(self.conv2(x)))
        x = F.hardswish(self.conv3(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


class TransformerBlock(nn.Module):
    """Embedding gather, attention (by hand and by scaled_dot_product_attention), layer_norm, gelu."""

    def __init__(self, vocab: int = 50, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(1, 16, dim) * 0.1)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff1 = nn.Linear(dim, 4 * dim)
        self.ff2 = nn.Linear(4 * dim, dim)
        self.out = nn.Linear(dim, 5)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        manual = torch.matmul(torch.softmax(scores, dim=-1), v)
        fused = F.scaled_dot_product_attention(q, k, v)
        attn = (manual + fused).transpose(1, 2).reshape(b, n, d)
        x = x + self.proj(attn)
        x = x + self.ff2(F.gelu(self.ff1(self.norm2(x))))
        return self.out(x.mean(dim=1)), torch.einsum("bnd,bmd->bnm", x, x) / d


class LSTMModel(nn.Module):
    def __init__(self, bidirectional: bool = False) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(16 * (2 if bidirectional else 1), 4)

    def forward(self, seq):
        out, (h, c) = self.lstm(seq)
        return self.head(out), h, c


class GRUModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(8, 16, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, seq):
        out, h = self.gru(seq)
        return self.head(out), h


class ResampleModel(nn.Module):
    """upsample (nearest, bilinear), pooling with padding/ceil_mode, concat, reshape, transpose, slice, pad."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.up = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)

    def forward(self, image):
        x = torch.tanh(self.conv(image))
        a = F.interpolate(x, scale_factor=2, mode="nearest")
        b = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        c = F.interpolate(x, size=(24, 20), mode="bilinear", align_corners=True)
        c = F.interpolate(c, size=(16, 16), mode="bilinear", align_corners=False)
        d = F.avg_pool2d(F.pad(x, (1, 1, 1, 1), mode="reflect"), 3, stride=2, padding=1, ceil_mode=True,
                         count_include_pad=False)
        e = F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)
        joined = torch.cat([a, b, c], dim=1)  # [1, 24, 16, 16]
        t = joined.reshape(1, 24, 256).transpose(1, 2)[:, 10:200:3, 2:20]
        u = torch.sigmoid(self.up(x))
        return t, d, e * 2.0, u, x[:, :, ::2, 1:7].permute(0, 2, 3, 1).flatten(1)


def _seeded(cls, *args):
    torch.manual_seed(0)
    return cls(*args).eval()


def _randn(*shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1))


MODELS = {
    "cnn": (lambda: _seeded(SmallCNN), lambda: [_randn(1, 3, 32, 32)], ["image"]),
    "transformer": (lambda: _seeded(TransformerBlock),
                    lambda: [torch.randint(0, 50, (1, 16), generator=torch.Generator().manual_seed(1))],
                    ["tokens"]),
    "lstm": (lambda: _seeded(LSTMModel), lambda: [_randn(1, 6, 8)], ["seq"]),
    "lstm_bidirectional": (lambda: _seeded(LSTMModel, True), lambda: [_randn(1, 6, 8)], ["seq"]),
    "gru": (lambda: _seeded(GRUModel), lambda: [_randn(1, 6, 8)], ["seq"]),
    "resample": (lambda: _seeded(ResampleModel), lambda: [_randn(1, 4, 8, 8)], ["image"]),
}
