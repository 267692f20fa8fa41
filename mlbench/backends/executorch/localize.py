"""A sweep's ExecuTorch variant localized: its program before lowering against the same model's float32
program without a recipe, both run op by op by PyTorch (``localize_program``; a portable float32 program's
values are its own kernels' outputs from ETDump, ``etdump_values``), then the .pte itself run by the
ExecuTorch runtime, so the section says how far the emulation is from what the runtime computes, and the
module outputs compared with eager PyTorch.

The Core ML delegate is refused: its float16 is Core ML's compute precision, applied inside the delegate,
which the program before lowering does not carry (the coreml backend's own localization runs its program).
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from mlbench.config.base import NO_OPTIMIZATION
from mlbench.localization import ErrorLocalization, ErrorSum

if TYPE_CHECKING:
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel

__all__ = ["EMULATED", "MEASURED", "NO_HALF_IN_ETDUMP", "localize_variant", "reference_variant"]

EMULATED = ("emulated: both programs run as exported before lowering, op by op on PyTorch's CPU kernels "
            "(ExecuTorch logs no values inside a delegate: ETDump's debug buffer has an XNNPACK call's outputs "
            "only; nor any float16 tensor); the runtime's own kernels round differently")
MEASURED = ("the variant's values are its portable kernels' own outputs (ETDump's debug buffer, named through the "
            "ETRecord); the reference program runs as exported before lowering, op by op on PyTorch's CPU kernels")


def reference_variant(variant: Variant) -> Variant:
    """The same variant at float32 without a recipe: what its program is compared with."""
    axes = tuple((k, "float32" if k == "precision" else NO_OPTIMIZATION if k == "optimize" else v)
                 for k, v in variant.axes)
    return dataclasses.replace(variant, axes=axes)


def localize_variant(backend: Any, model: LoadedModel, variant: Variant) -> ErrorLocalization:
    """The variant's ErrorLocalization (raises what the export or a run raises, as one line)."""
    from mlbench.backends.executorch.export import HALF_PREFIX, program_before_lowering
    from mlbench.backends.executorch.localize_program import localize_exported
    from mlbench.backends.source_frames import wrapper_prefix

    started = time.perf_counter()
    delegate, precision = variant.axis("delegate"), variant.axis("precision")
    if delegate == "coreml":
        raise ValueError("the Core ML delegate's precision is applied inside the delegate, which the program before "
                         "lowering does not carry: localize the coreml backend's variant instead")
    if model.alternative(variant.shape) != 0:
        raise ValueError("the .pte is exported for the first input shape only")
    reference = reference_variant(variant)
    samples = [list(model.sample(i, 0)[0]) for i in range(backend.config.verify.samples)]

    def program(of: Variant) -> Any:
        return program_before_lowering(model.torch_module, model.example_inputs, delegate=delegate,
                                       precision=of.axis("precision"), recipe=backend._recipe(of))

    mine = program(variant)
    prefix = (HALF_PREFIX if precision == "float16" else "") + wrapper_prefix(model.torch_module)
    used = samples[:1] if reference == variant else samples
    measured, why = _kernel_outputs(backend, model, variant, mine, used) if delegate == "portable" else (None, None)
    if reference == variant:
        found = localize_exported(mine, mine, used, variant_id=variant.id, reference_label="itself",
                                  prefix=prefix, measured=measured)
        found.notes.insert(0, "a float32 program without a recipe is its own reference: see the module outputs "
                           "against eager PyTorch")
        theirs = mine
    else:
        theirs = program(reference)
        found = localize_exported(mine, theirs, samples, variant_id=variant.id, prefix=prefix, measured=measured,
                                  reference_label=f"{reference.id} (float32, no recipe), as exported before lowering")
    found.notes.insert(0, MEASURED if found.source == "measured" else EMULATED)
    if why:
        found.notes.insert(1, why)
    runtime = runtime_note(backend, model, variant, theirs, samples, found.output_snr_db, found.source)
    if runtime:
        found.notes.append(runtime)
    if model.has_source:
        found.eager = _eager(model, mine, samples[0], prefix)
    found.seconds = time.perf_counter() - started
    return found


NO_HALF_IN_ETDUMP = ("ETDump (executorch 1.5.1) logs no float16 tensor ('ScalarType = 5 is not yet supported in "
                     "ETDump'), so a float16 program's kernel outputs cannot be read")


def _kernel_outputs(backend: Any, model: LoadedModel, variant: Variant, program: Any,
                    samples: list[list[Any]]) -> tuple[list[dict[str, np.ndarray]] | None, str | None]:
    """The portable program's own kernel outputs per sample, or None and why not."""
    from mlbench.backends.executorch.etdump_values import kernel_outputs, program_bytes
    from mlbench.backends.executorch.export import ETRECORD
    from mlbench.errors import one_line

    if variant.axis("precision") == "float16":
        return None, NO_HALF_IN_ETDUMP
    artifact = backend.export(model, variant).payload
    etrecord = artifact.folder / ETRECORD
    if not etrecord.exists():
        return None, "the program's ETRecord is missing, so its kernel outputs cannot be named"
    try:
        return kernel_outputs(artifact.pte, etrecord, samples, program_bytes(program)), None
    except Exception as exc:  # noqa: BLE001 - the emulated values still stand
        return None, one_line(f"the runtime's kernel outputs could not be read: {type(exc).__name__}: {exc}", 300)


def runtime_note(backend: Any, model: LoadedModel, variant: Variant, reference: Any, samples: list[list[Any]],
                 table_snr: float | None, source: str) -> str | None:
    """The .pte run by ExecuTorch against the reference program: its output SNR beside the emulation's
    (measured), or None where this runtime cannot run the delegate."""
    from mlbench.backends.executorch.localize_program import ExportedRun
    from mlbench.localization import snr_of

    if backend._unavailable(variant.axis("delegate")):
        return None
    method = backend._load(backend.export(model, variant).payload)
    run = ExportedRun(reference)
    sums = ErrorSum()
    for inputs in samples:
        got = method.execute([t.detach().cpu().contiguous() for t in inputs])
        for a, r in zip(got, run.outputs(run.run(inputs))):
            if r is not None and hasattr(a, "detach") and a.is_floating_point() and a.numel() == r.size:
                sums.add(a.detach().double().numpy(), r)
    measured = snr_of(sums.rel_error)
    return (f"the .pte run by ExecuTorch ({variant.axis('delegate')}): output SNR {_db(measured)} against the "
            f"reference program (measured); the table's ({source}): {_db(table_snr)}")


def _db(value: float | None) -> str:
    return "exact" if value is None else f"{value:.1f} dB"


def _eager(model: LoadedModel, program: Any, inputs: list[Any], prefix: str) -> list:
    from mlbench.backends.eager_modules import eager_modules
    from mlbench.backends.executorch.localize_program import ExportedRun, _array, program_origins

    run = ExportedRun(program)
    env = run.run(inputs)
    values: list[tuple[str, str, np.ndarray | None]] = [(n.name, n.name, _array(env.get(n.name)))
                                                         for n in run.computes()]
    return eager_modules(model.torch_module, inputs, values, program_origins(program, prefix))
