"""Seeded input sets: what each input means (`range`, `fill`, `values`, `kind: image`) made concrete.

Input set k is drawn under seed + k, so every backend and every run sees the same sets. An input
with `values:` takes sample k mod N of its file. An image input is drawn as whole pixels 0-255 in
its colour layout; the model (eager, ONNX) gets pixel × scale + bias, as a Core ML ImageType does
inside the package, and `pixels()` turns such a tensor back into the pixels an ImageType takes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import torch

    from mlbench.config.models import ModelInput, ModelSpec

DEFAULT_INTEGER_RANGE = (0, 10)


class InputMaker:
    """Makes input set k at shape alternative a for one model (values files read once)."""

    def __init__(self, spec: ModelSpec, seed: int, base_dir: Path | None = None) -> None:
        from mlbench.sources.values import read_values

        self.spec, self.seed = spec, seed
        self._values: dict[str, np.ndarray] = {
            item.name: read_values(item, base_dir or Path.cwd()) for item in spec.inputs if item.values is not None}

    @property
    def value_samples(self) -> int | None:
        """How many real samples the `values:` files hold (None: no input has values)."""
        return min((len(v) for v in self._values.values()), default=None)

    def make(self, index: int = 0, alternative: int = 0) -> list[torch.Tensor]:
        import torch

        generator = torch.Generator().manual_seed(self.seed + index)
        return [self._one(item, index, alternative, generator) for item in self.spec.inputs]

    def _one(self, item: ModelInput, index: int, alternative: int, generator: torch.Generator) -> torch.Tensor:
        import torch

        dtype = getattr(torch, item.dtype)
        shape = item.concrete_shape(alternative)
        if item.name in self._values:
            samples = self._values[item.name]
            tensor = torch.from_numpy(samples[index % len(samples)].copy()).to(dtype)
            return normalise_image(tensor, item) if item.kind == "image" else tensor
        if item.fill is not None:
            return (torch.ones if item.fill == "ones" else torch.zeros)(shape, dtype=dtype)
        if item.kind == "image":
            return normalise_image(torch.randint(0, 256, shape, generator=generator).to(dtype), item)
        if dtype.is_floating_point:
            return torch.randn(shape, generator=generator).to(dtype)
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=generator).bool()
        low, high = item.range or DEFAULT_INTEGER_RANGE
        return torch.randint(low, high, shape, generator=generator, dtype=dtype)


def image_scale_bias(item: ModelInput) -> tuple[float, list[float]]:
    """(scale, per-channel bias) of an image input, defaults filled in."""
    bias = item.bias or [0.0]
    return (1.0 if item.scale is None else item.scale), (bias * item.channels if len(bias) == 1 else list(bias))


def normalise_image(pixels: torch.Tensor, item: ModelInput) -> torch.Tensor:
    """What the model sees of an image: pixel × scale + bias, per channel."""
    import torch

    scale, bias = image_scale_bias(item)
    return pixels * scale + torch.tensor(bias, dtype=pixels.dtype).reshape(1, -1, 1, 1)


def pixels(tensor: torch.Tensor, item: ModelInput) -> torch.Tensor:
    """The whole pixels 0-255 an image tensor was made from (the inverse of normalise_image)."""
    import torch

    scale, bias = image_scale_bias(item)
    raw = (tensor - torch.tensor(bias, dtype=tensor.dtype).reshape(1, -1, 1, 1)) / (scale or 1.0)
    return raw.round().clamp(0, 255)
