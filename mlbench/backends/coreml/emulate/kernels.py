"""Every kernel family, imported so that each registers its op types, and the set that gives."""

from __future__ import annotations

import mlbench.backends.coreml.emulate.kernels_compression
import mlbench.backends.coreml.emulate.kernels_conv
import mlbench.backends.coreml.emulate.kernels_detection
import mlbench.backends.coreml.emulate.kernels_elementwise
import mlbench.backends.coreml.emulate.kernels_indexing
import mlbench.backends.coreml.emulate.kernels_layout
import mlbench.backends.coreml.emulate.kernels_list
import mlbench.backends.coreml.emulate.kernels_nn
import mlbench.backends.coreml.emulate.kernels_random
import mlbench.backends.coreml.emulate.kernels_recurrent
import mlbench.backends.coreml.emulate.kernels_sampling
import mlbench.backends.coreml.emulate.kernels_state
import mlbench.backends.coreml.emulate.kernels_tensor  # noqa: F401
from mlbench.backends.coreml.emulate.registry import CONTROL_FLOW_OPS, KERNELS


def supported_op_types() -> frozenset[str]:
    """Every op type the interpreter can run (kernels, ``const`` and control flow)."""
    return frozenset(KERNELS) | CONTROL_FLOW_OPS | {"const"}
