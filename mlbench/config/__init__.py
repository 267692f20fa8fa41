"""The pipeline definition: pydantic models of the YAML (the one source of truth), the safe YAML
loader, and the JSON schema generated from the models.

`load_pipeline` and `Pipeline` are re-exported lazily: backend target models import
`mlbench.config.base`, and an eager import of the pipeline module here would import every
backend's target while that target is still being imported.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Pipeline", "PipelineConfig", "load_pipeline"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from mlbench.config import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'mlbench.config' has no attribute {name!r}")
