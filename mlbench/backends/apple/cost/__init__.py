"""FLOPs and bytes of every MIL operation, and a roofline time-like cost (see DESIGN.md, "How Core
ML figures are estimated": the *cost* link).

One function per op family, registered by op type (``base.register``); the conventions are in
each family module's docstring. ``op_cost(OpDescription) -> OpCost`` never raises: unknown op
types get ``flops=None`` with their bytes still counted. ``mil.describe_mil_op`` builds the
description from a MIL op of a saved ML program.
"""

from mlbench.backends.apple.cost import families  # noqa: F401  (registers the families)
from mlbench.backends.apple.cost.base import (
    OpCost,
    OpDescription,
    ProgramCost,
    TensorSpec,
    op_cost,
    program_cost,
    registered_op_types,
)
from mlbench.backends.apple.cost.roofline import Roofline, load_roofline, time_like_cost

__all__ = [
    "OpCost",
    "OpDescription",
    "ProgramCost",
    "Roofline",
    "TensorSpec",
    "load_roofline",
    "op_cost",
    "program_cost",
    "registered_op_types",
    "time_like_cost",
]
