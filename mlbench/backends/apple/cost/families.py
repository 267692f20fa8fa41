"""Imports every family module, so that each registers its op types."""

import mlbench.backends.apple.cost.elementwise
import mlbench.backends.apple.cost.linalg
import mlbench.backends.apple.cost.movement
import mlbench.backends.apple.cost.normalization
import mlbench.backends.apple.cost.recurrent
import mlbench.backends.apple.cost.spatial  # noqa: F401
