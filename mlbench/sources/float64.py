"""How precise eager float32 itself is: the same model run in float64 on the same seeded inputs.

A verification floor is a demand on the export relative to the reference; when the reference is
itself far from the exact answer (outputs below float32's normal range, about 1e-38, keep only a
few significant bits), no export can meet a floor the reference does not (``mlbench.verify``).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mlbench.sources.loading import LoadedModel


def float64_snr_db(model: LoadedModel, samples: int, alternative: int = 0) -> float | None:
    """The least SNR of eager float32's outputs against the model in float64 over the seeded samples;
    None when the model has no source, cannot run in float64, or every output agrees exactly."""
    import torch

    from mlbench.sources.loading import flatten_outputs
    from mlbench.verify import snr_db

    if model.module is None:
        return None
    try:
        wide = copy.deepcopy(model.module).double()
    except Exception:  # noqa: BLE001 - a module that cannot be copied or widened has no float64 run
        return None
    worst: float | None = None
    for index in range(samples):
        inputs, reference = model.sample(index, alternative)
        feeds = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
        try:
            with torch.inference_mode():
                outputs = flatten_outputs(wide(*feeds))
        except Exception:  # noqa: BLE001 - an op without a float64 kernel: no float64 run
            return None
        for (_name, ref), (_wide_name, exact) in zip(reference, outputs):
            if not isinstance(exact, torch.Tensor) or not exact.is_floating_point():
                continue
            snr = snr_db(exact.detach().cpu().numpy().astype(np.float64), ref)
            if snr is not None:
                worst = snr if worst is None else min(worst, snr)
    return worst
