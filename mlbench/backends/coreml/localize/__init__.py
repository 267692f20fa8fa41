"""Where a Core ML variant loses accuracy: its program against a reference program, op by op, on any OS.

    from mlbench.backends.coreml.localize import localize_packages
    found = localize_packages("palettized.mlpackage", "float32.mlpackage", [{"x": array}])
    found.ops[found.first_jump].described      # 'encoder.layer.3.attention.softmax (models.py:88)'

Modules: ``pairing`` (variant op -> reference op), ``programs`` (the runs and figures), ``weights``
(bytes each module's compression saves), ``advice`` (which modules to leave uncompressed), ``variant``
(a sweep's variant: its reference exported through the cache). Module outputs against eager PyTorch:
``mlbench.backends.eager_modules``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlbench.backends.coreml.localize.programs import LocalizeOptions, localize_programs
from mlbench.localization import ErrorLocalization

__all__ = ["LocalizeOptions", "localize_packages", "localize_programs"]


def localize_packages(variant: str | Path, reference: str | Path, feeds: list[dict[str, np.ndarray]], *,
                      variant_id: str | None = None, options: LocalizeOptions | None = None) -> ErrorLocalization:
    """Per-op error of the package ``variant`` against ``reference`` (the same model's float32 program
    without compression), each op named by the module it came from when the package records it."""
    from mlbench.backends.coreml.emulate import Emulator, load_program
    from mlbench.backends.coreml.origins import package_origins

    return localize_programs(
        Emulator(load_program(variant)), Emulator(load_program(reference)), feeds,
        origins=package_origins(variant), variant_id=variant_id or str(variant), backend="coreml",
        reference_label=f"the Core ML program {Path(reference).name}, emulated", options=options)
