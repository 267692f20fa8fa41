"""Export a PyTorch module to a Core ML ML program (``.mlpackage``), optionally weight-compressed.

The steps, each in its own module: check the options (``deployment``), convert by
``torch.jit.trace`` or else ``torch.export`` (``conversion``), compress the weights
(``compression``); then record how it was made in the package's metadata and save it.

coremltools' log warnings, Python warnings and tqdm progress bars are captured while exporting
(``sys.stderr`` is redirected meanwhile, process-wide) and returned, shortened and deduplicated,
in ``ExportResult.warnings`` (``messages``).

The compute units are not an export option (Core ML picks them when the model is loaded), so they
do not appear here. Works on Linux: conversion, weight compression and saving need no macOS.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.backends.apple.coremltools_messages import (
    clean_warnings,
    coremltools_captured,
    import_coremltools,
    import_messages,
    version_warning,
)
from mlbench.backends.coreml.compression import compress
from mlbench.backends.coreml.conversion import (
    EXPORT_PATH_TORCH_EXPORT,
    EXPORT_PATH_TRACE,
    check_input_names,
    convert_module,
    convert_options,
)
from mlbench.backends.coreml.deployment import ExportError, check_deployment_target
from mlbench.backends.coreml.origins import ORIGINS_KEY, decode_origins
from mlbench.backends.coreml.torch_ops import register_extra_torch_ops

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from mlbench.config.models import ModelInput

__all__ = [
    "EXPORT_PATH_TORCH_EXPORT",
    "EXPORT_PATH_TRACE",
    "PACKAGE_NAME",
    "ExportResult",
    "export_coreml",
]

PACKAGE_NAME = "model.mlpackage"
METADATA_PREFIX = "mlbench."


@dataclass
class ExportResult:
    artifact: Path  # the saved .mlpackage
    export_path: str  # "torch.jit.trace" or "torch.export"
    deployment_target: str  # the one used, e.g. "iOS16"
    seconds: float  # wall time of trace/export + convert (both paths if it fell back) + compress + save
    fallback_reason: str | None  # short reason the first path failed, if it did
    warnings: list[str] = field(default_factory=list)


def export_coreml(
    module: torch.nn.Module,
    example_inputs: list[torch.Tensor],
    input_names: list[str],
    *,
    precision: str,
    optimization: dict | None,
    deployment_target: str | None,
    dest: Path,
    inputs: list[ModelInput] | None = None,
    calibration: list[dict[str, Any]] | None = None,
) -> ExportResult:
    """Convert ``module`` to an ML program and save it as ``dest/model.mlpackage``.

    ``inputs`` (the pipeline's input specs) make flexible shapes and image inputs (``input_types``);
    ``calibration`` (input dicts as the package takes them) feeds activation quantization.
    Raises InvalidExportOptions (a ValueError) for bad options, before any work is done, and
    ExportError with a one-line message when neither export path produces a model.
    """
    target_name = check_deployment_target(deployment_target, precision, optimization,
                                          enumerated_inputs=_enumerated(inputs))
    example_inputs = list(example_inputs)
    input_names = list(input_names)
    check_input_names(example_inputs, input_names)

    ct = import_coremltools()  # once per process; not part of the export's time
    register_extra_torch_ops()
    started = time.perf_counter()
    convert_kwargs = convert_options(ct, precision, target_name)
    sink: list[str] = []
    mlmodel, export_path, fallback_reason = convert_module(
        ct, module.eval(), example_inputs, input_names, convert_kwargs, sink, inputs
    )
    if optimization is not None:
        origins = mlmodel.user_defined_metadata.get(ORIGINS_KEY)
        mlmodel = compress(ct, mlmodel, optimization, sink, calibration, decode_origins(origins))
        if origins and ORIGINS_KEY not in mlmodel.user_defined_metadata:  # compressed ops keep their names
            mlmodel.user_defined_metadata[ORIGINS_KEY] = origins

    metadata = {
        "precision": precision,
        "export_path": export_path,
        "deployment_target": target_name,
        "optimization": json.dumps(optimization, sort_keys=True) if optimization is not None else "none",
        "fallback_reason": fallback_reason or "",
        "input_names": ",".join(input_names),
        "torch_version": _torch_version(),
        "coremltools_version": str(ct.__version__),
        "version": _mlbench_version(),
    }
    for key, value in metadata.items():
        mlmodel.user_defined_metadata[METADATA_PREFIX + key] = value
    mlmodel.short_description = f"mlbench export ({export_path}, {precision}, {target_name})"

    artifact = _save(mlmodel, Path(dest), sink)
    return ExportResult(
        artifact=artifact,
        export_path=export_path,
        deployment_target=target_name,
        seconds=time.perf_counter() - started,
        fallback_reason=fallback_reason,
        warnings=version_warning(ct) + clean_warnings(import_messages() + sink),
    )


def _save(mlmodel: Any, dest: Path, sink: list[str]) -> Path:
    artifact = dest / PACKAGE_NAME
    try:
        dest.mkdir(parents=True, exist_ok=True)
        if artifact.exists():
            shutil.rmtree(artifact) if artifact.is_dir() else artifact.unlink()
        with coremltools_captured(sink):
            mlmodel.save(str(artifact))
    except OSError as exc:
        raise ExportError(f"cannot write {artifact}: {exc.strerror or exc}") from None
    return artifact


def _enumerated(inputs: list[ModelInput] | None) -> int:
    return sum(1 for i in inputs or [] if any(isinstance(d, list) and len(set(d)) > 1 for d in i.shape))


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def _mlbench_version() -> str:
    try:
        from mlbench import __version__ as mlbench_version
    except Exception:  # noqa: BLE001 # pragma: no cover
        mlbench_version = "unknown"
    return str(mlbench_version)
