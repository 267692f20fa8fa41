"""The eager PyTorch target: which devices and precisions a `backend: torch` entry sweeps."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlbench.config.base import Axis, TargetBase


class TorchTarget(TargetBase):
    """Eager PyTorch under `torch.inference_mode()`."""

    backend: Literal["torch"] = Field(description="Eager PyTorch.")
    device: Axis[Literal["cpu", "cuda", "mps"]] = Field(
        default=["cpu"], description="Devices to run on; unavailable ones are skipped, not failed."
    )
    precision: Axis[Literal["float32", "float16", "bfloat16"]] = Field(
        default=["float32"], description="Weights and floating inputs are cast to this dtype."
    )
    threads: int | None = Field(
        default=None, ge=1, description="Intra-op CPU threads (torch.set_num_threads); default: torch's own."
    )

    axes = ("device", "precision")
    artifact_axes = ("precision",)
