"""The pipeline definition: pydantic models of the YAML (the one source of truth), the safe YAML
loader with positions, and parsing a file into a `Pipeline`. Config only defines: the checks that need
the whole pipeline (and `load_pipeline`) are `mlbench.validate`'s.

`Pipeline` and `PipelineConfig` are re-exported lazily: backend target models
import `mlbench.config.base`, and an eager import of the pipeline models here would import every
backend's target while that target is still being imported.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Pipeline", "PipelineConfig"]


def __getattr__(name: str) -> Any:
    if name == "PipelineConfig":
        from mlbench.config.pipeline import PipelineConfig

        return PipelineConfig
    if name == "Pipeline":
        from mlbench.config import pipeline_file

        return pipeline_file.Pipeline
    raise AttributeError(f"module 'mlbench.config' has no attribute {name!r}")
