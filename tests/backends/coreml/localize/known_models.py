"""Models built so the answer is known: which module, at which line, carries the error.

Each line a test expects an op to come from ends with a `# LINE:<name>` marker; `line_of(name)` finds it.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__)


def line_of(marker: str) -> int:
    """The line of this file that ends with `# LINE:<marker>`."""
    for number, text in enumerate(HERE.read_text(encoding="utf-8").splitlines(), start=1):
        if text.rstrip().endswith(f"# LINE:{marker}"):
            return number
    raise LookupError(marker)


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)  # LINE:block_fc
        return torch.softmax(y, dim=-1) * 4.0  # LINE:block_softmax


class Stack(nn.Module):
    """Blocks in a ModuleList (TorchScript leaves the container's name out of its scopes), then a head."""

    def __init__(self, width: int = 64, depth: int = 3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(width) for _ in range(depth)])
        self.head = nn.Linear(width, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)  # LINE:stack_block
        return self.head(x)  # LINE:stack_head


class Overflowing(nn.Module):
    """`big` computes values past float16's range (its weights × 1e5); the layer norm after it brings them
    back, so float32 is fine and float16 turns to inf there."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.pre = nn.Linear(width, width)
        self.big = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        with torch.no_grad():
            self.big.weight.mul_(1e5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.pre(x))  # LINE:overflow_pre
        x = self.big(x)  # LINE:overflow_big
        return self.norm(x)  # LINE:overflow_norm


class Chain(nn.Module):
    """Linear layers one after another (weights of at least 2048 elements, so compression takes them)."""

    def __init__(self, width: int = 64, depth: int = 2) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)  # LINE:chain


def flip_one_sign(model: Chain, layer: int) -> Chain:
    """A copy of `model` with the largest weight of one layer negated."""
    import copy

    flipped = copy.deepcopy(model)
    weight = flipped.layers[layer].weight
    with torch.no_grad():
        index = torch.argmax(weight.abs())
        weight.view(-1)[index] = -weight.view(-1)[index]
    return flipped


class FourValued(nn.Module):
    """Four layers whose weights take four values each (2-bit palettization keeps them exactly), but `sensitive`,
    whose normal weights 2-bit palettization spoils: palettizing everything breaks accuracy, excluding it mends it."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(7)
        self.first = nn.Linear(width, width)
        self.second = nn.Linear(width, width)
        self.sensitive = nn.Linear(width, width)
        self.last = nn.Linear(width, width)
        levels = torch.tensor([-0.125, -0.0625, 0.0625, 0.125])
        with torch.no_grad():
            for layer in (self.first, self.second, self.last):
                picks = torch.randint(0, 4, layer.weight.shape, generator=generator)
                layer.weight.copy_(levels[picks])
            self.sensitive.weight.copy_(torch.randn(self.sensitive.weight.shape, generator=generator) * 0.125)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.first(x))
        x = torch.relu(self.second(x))
        x = torch.relu(self.sensitive(x))  # LINE:sensitive
        return self.last(x)


def four_valued() -> FourValued:
    """The factory a pipeline names (`known_models.py:four_valued`)."""
    return FourValued()


class Tied(nn.Module):
    """An embedding and an output layer sharing one weight (as GPT-2's wte and lm_head do)."""

    def __init__(self, vocab: int = 64, width: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.out = nn.Linear(width, vocab, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.embed(ids)))
