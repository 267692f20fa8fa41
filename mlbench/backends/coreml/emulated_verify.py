"""Verification of a Core ML package on any OS: mlbench's interpreter runs the saved program on the
pipeline's seeded inputs and its outputs are compared with eager PyTorch's (`source: emulated`).

What it answers is whether the program coremltools wrote computes what the model computes; it does
not say what the Neural Engine's or the GPU's own arithmetic adds (EMULATION_NOTE says so).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mlbench.backends.base import NO_SOURCE
from mlbench.plugins.spec import REFERENCE
from mlbench.records import Metric

RANDOM_NOT_COMPARABLE = "random op: values not comparable"

if TYPE_CHECKING:
    from mlbench.backends.coreml.artifact import CoremlArtifact
    from mlbench.backends.coreml.emulate import Emulator
    from mlbench.records import Verification
    from mlbench.sources.loading import LoadedModel


def emulated_verification(artifact: CoremlArtifact, model: LoadedModel, *, samples: int, tolerance: float,
                          min_snr_db: float, alternative: int = 0, float32: bool = False
                          ) -> tuple[Verification | None, str | None]:
    """(verification, None), or (None, the reason it could not be had: an op the interpreter lacks,
    a model type it does not run, a program it cannot read, a random op). ``float32``: the variant is a
    float32 export, whose SNR floor is capped at the reference's own precision (``mlbench.verify``)."""
    from mlbench.backends.coreml.emulate import (
        EMULATION_NOTE,
        CorruptPackage,
        EmulationError,
        Emulator,
        UnsupportedOps,
        load_program,
    )
    from mlbench.backends.coreml.emulate.kernels_random import RANDOM_OPS
    from mlbench.sources.float64 import float64_snr_db
    from mlbench.verify import OutputMismatch, compare_samples

    if not model.has_source:
        return None, NO_SOURCE
    if artifact.analysis.model_type != "mlProgram":
        return None, f"the interpreter runs ML programs, not {artifact.analysis.model_type} models"
    try:
        program = load_program(artifact.package)
        if RANDOM_OPS & set(program.op_types()):  # seeded here, but no generator agrees with Core ML's or torch's
            return None, RANDOM_NOT_COMPARABLE
        emulator = Emulator(program)
        pairs, fed = [], []
        for index in range(samples):
            inputs, reference = model.sample(index, alternative)
            feeds = package_feeds(model, inputs)
            outputs = emulator.run(feeds)
            pairs.append((reference, list(outputs.values())))
            fed.append(feeds)
        own = (lambda: float64_snr_db(model, samples, alternative)) if float32 else None
        verification = compare_samples(pairs, tolerance=tolerance, min_snr_db=min_snr_db, reference_name=REFERENCE,
                                       source="emulated", method=EMULATION_NOTE, reference_precision_db=own)
        verification = _name_overflow(verification, emulator, pairs, fed)
    except UnsupportedOps as exc:
        return None, f"the interpreter lacks {', '.join(exc.ops)}"
    except (EmulationError, CorruptPackage, OutputMismatch, ValueError) as exc:
        return None, f"emulation failed: {' '.join(str(exc).split())[:200]}"
    return verification, None


def _name_overflow(verification: Verification, emulator: Emulator, pairs: list, fed: list[dict]) -> Verification:
    """When an output came out inf or nan: the op where the float16 program first passes float16's range."""
    import math

    from mlbench.backends.coreml.emulate.overflow import first_float16_overflow
    from mlbench.overflow import float16_overflow

    if math.isfinite(verification.max_abs):
        return verification
    for (_reference, outputs), feeds in zip(pairs, fed):
        if all(np.isfinite(np.asarray(o, dtype=np.float64)).all() for o in outputs):
            continue
        op = first_float16_overflow(emulator, feeds)
        if op is not None:
            return verification.model_copy(update={"overflow": float16_overflow(pairs, op)})
        break
    return verification


def package_feeds(model: LoadedModel, inputs: list) -> dict:
    """Numpy feeds by input name; an image input as the whole pixels a Core ML ImageType takes."""
    from mlbench.sources.inputs import pixels

    feeds = {}
    for item, tensor in zip(model.spec.inputs, inputs):
        feeds[item.name] = (pixels(tensor, item) if item.kind == "image" else tensor).detach().cpu().numpy()
    return feeds


def verification_metrics(verification: Verification | None, reason: str | None, *, prefix: str = "verify"
                         ) -> dict[str, Metric]:
    """`verify.max_abs`, `verify.max_rel` (and SNR, top-1 where known) with the verification's source;
    absent with the reason when there is none."""
    if verification is None:
        why = reason or "not verified"
        return {f"{prefix}.max_abs": Metric.absent("abs", why), f"{prefix}.max_rel": Metric.absent("rel", why)}
    source = verification.source
    why = verification.why_not_finite  # an overflow makes these inf: absent, saying so
    metrics = {f"{prefix}.max_abs": Metric.figure(verification.max_abs, "abs", source, why_not_finite=why),
               f"{prefix}.max_rel": Metric.figure(verification.max_rel, "rel", source, why_not_finite=why)}
    if verification.snr_db is not None:
        metrics[f"{prefix}.snr_db"] = Metric.figure(verification.snr_db, "dB", source, why_not_finite=why)
    if verification.top1_agreement is not None:
        metrics[f"{prefix}.top1_agreement"] = Metric(value=verification.top1_agreement, unit="ratio", source=source)
    return metrics
