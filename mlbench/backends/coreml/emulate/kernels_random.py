"""Random kernels. Values cannot agree with Core ML's generator (or with PyTorch's) value by value: each
op draws from a ``torch.Generator`` seeded by the op's own ``seed`` (``RANDOM_SEED`` when it is -1, the
default), so that a run is repeatable, and verification of a program holding one of ``RANDOM_OPS`` says
"random op: values not comparable" rather than passing or failing on noise."""

from __future__ import annotations

import torch

from mlbench.backends.coreml.emulate.registry import as_float, as_int, as_ints, as_str, kernel

RANDOM_OPS = frozenset({"random_bernoulli", "random_categorical", "random_normal", "random_uniform"})
RANDOM_SEED = 0
"""The seed of an op whose ``seed`` is -1 (coremltools' default: "unseeded")."""


def _generator(seed) -> torch.Generator:
    value = as_int(seed) if seed is not None else -1
    return torch.Generator().manual_seed(value if value >= 0 else RANDOM_SEED)


@kernel("random_uniform")
def random_uniform(shape, low=0.0, high=1.0, seed=-1, **_):
    low, high = as_float(low), as_float(high)
    return low + (high - low) * torch.rand(as_ints(shape), generator=_generator(seed))


@kernel("random_normal")
def random_normal(shape, mean=0.0, stddev=1.0, seed=-1, **_):
    return as_float(mean) + as_float(stddev) * torch.randn(as_ints(shape), generator=_generator(seed))


@kernel("random_bernoulli")
def random_bernoulli(shape, prob=0.5, seed=-1, **_):
    draws = torch.rand(as_ints(shape), generator=_generator(seed))
    return (draws < as_float(prob)).to(torch.float32)


@kernel("random_categorical")
def random_categorical(x, mode="logits", size=1, seed=-1, **_):
    """``size`` class indices per distribution (the last axis), drawn with replacement, as floats."""
    probs = torch.softmax(x.to(torch.float64), dim=-1) if as_str(mode) == "logits" else x.to(torch.float64)
    rows = probs.reshape(-1, probs.shape[-1]).clamp(min=0)
    drawn = torch.multinomial(rows, as_int(size), replacement=True, generator=_generator(seed))
    return drawn.reshape(*x.shape[:-1], as_int(size)).to(torch.float32)
