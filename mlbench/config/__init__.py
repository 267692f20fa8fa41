"""The pipeline definition: pydantic models of the YAML (the one source of truth), the safe YAML
loader, and reading a file into a validated `Pipeline`.

`load_pipeline`, `Pipeline` and `PipelineConfig` are re-exported lazily: backend target models
import `mlbench.config.base`, and an eager import of the pipeline models here would import every
backend's target while that target is still being imported.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Pipeline", "PipelineConfig", "load_pipeline"]


def __getattr__(name: str) -> Any:
    if name == "PipelineConfig":
        from mlbench.config.pipeline import PipelineConfig

        return PipelineConfig
    if name in ("Pipeline", "load_pipeline"):
        from mlbench.config import load

        return getattr(load, name)
    raise AttributeError(f"module 'mlbench.config' has no attribute {name!r}")
