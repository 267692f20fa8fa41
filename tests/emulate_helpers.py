"""Shared helpers for the interpreter's tests: the one place that imports mlbench's exporter.

The exporter may move while the package is restructured; fix the import here only.
"""

from __future__ import annotations

from mlbench.backends.coreml.export import export_coreml  # noqa: F401  (the one import path)
