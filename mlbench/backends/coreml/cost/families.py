"""Imports every family module, so that each registers its op types."""

import mlbench.backends.coreml.cost.elementwise
import mlbench.backends.coreml.cost.linalg
import mlbench.backends.coreml.cost.movement
import mlbench.backends.coreml.cost.normalization
import mlbench.backends.coreml.cost.recurrent
import mlbench.backends.coreml.cost.spatial  # noqa: F401
