"""The one error a model source raises: why the model could not be built, in one line."""

from __future__ import annotations


class ModelLoadError(Exception):
    """The model could not be built: recorded as the failure of each of its variants."""
