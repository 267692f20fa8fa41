"""Imports every family module, so that each registers its op types."""

from mlbench.backends.coreml.cost import (  # noqa: F401
    elementwise, linalg, movement, normalization, recurrent, spatial)
