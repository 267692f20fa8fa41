"""Imports every family module, so that each registers its op types."""

from mlbench.backends.coreml.cost import elementwise, linalg, movement, normalization, recurrent, spatial  # noqa: F401
