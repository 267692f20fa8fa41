"""Static analysis of a saved Core ML model, without a Core ML runtime.

``analyse_package(path)`` reads an ``.mlpackage`` directory or an ``.mlmodel`` file and
describes what it holds: the model type, the compute precision, the operations of the
program (in program order, nested blocks included), parameters, weight bytes as stored
(compressed weights count at their compressed size), multiply-accumulates and FLOPs.

It reads the protobuf spec only (``package``), walks its operations (``walker``), attributes
stored weights to the ops that use them (``weights``) and returns ``records``; the definitions
of its figures are in ``records``.
"""

from __future__ import annotations

from pathlib import Path

from mlbench.backends.apple.analysis.package import SPEC_VERSION_OS, BlobReader, describe_feature, disk_size, load_spec
from mlbench.backends.apple.analysis.records import (
    ANALYSIS_VERSION,
    LayerInfo,
    ProgramAnalysis,
    TensorDescription,
    Totals,
)
from mlbench.backends.apple.analysis.walker import (
    MAC_OPS,
    NEURAL_NETWORK_TYPES,
    analyse_neural_network,
    analyse_program,
)
from mlbench.errors import UserError

__all__ = [
    "ANALYSIS_VERSION",
    "MAC_OPS",
    "LayerInfo",
    "ProgramAnalysis",
    "TensorDescription",
    "Totals",
    "analyse_package",
]


def analyse_package(path: str | Path, function: str | None = None) -> ProgramAnalysis:
    """Analyse a saved Core ML model (``.mlpackage`` directory or ``.mlmodel`` file); ``function``: which
    function of a multifunction ML program (default: its default function).

    Raises ``UserError`` (one line, ``file=path``) when the path does not exist, is not a
    Core ML model, or is corrupt.
    """
    path = Path(path)
    spec, spec_file, package_root = load_spec(path)
    model_type = spec.WhichOneof("Type")
    notes: list[str] = []
    model_dir = spec_file.parent if package_root is not None else None
    blobs = BlobReader(model_dir, path)
    try:
        if model_type == "mlProgram":
            details = analyse_program(spec, blobs, notes, function)
        elif model_type in NEURAL_NETWORK_TYPES:
            details = analyse_neural_network(spec, model_type, notes)
        else:
            notes.append(f"{model_type} model: only its inputs and outputs are described")
            details = {
                "precision": "UNKNOWN",
                "op_counts": {},
                "const_count": 0,
                "layers": [],
                "totals": Totals(
                    compute_ops=0, const_ops=0, weight_ops=0, params=None, weight_bytes=None,
                    macs=None, flops=None, macs_complete=False,
                ),
            }
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - a spec that parses but does not hold together
        raise UserError(f"cannot analyse the model spec: {type(exc).__name__}: {exc}", file=path) from None
    finally:
        blobs.close()

    try:
        inputs = [describe_feature(f) for f in spec.description.input]
        outputs = [describe_feature(f) for f in spec.description.output]
    except Exception as exc:  # noqa: BLE001 - any malformed feature description
        raise UserError(f"cannot read the model's inputs and outputs: {exc}", file=path) from None

    return ProgramAnalysis(
        path=str(path),
        model_type=model_type,
        spec_version=int(spec.specificationVersion),
        min_os=SPEC_VERSION_OS.get(int(spec.specificationVersion)),
        package_size_bytes=disk_size(path),
        inputs=inputs,
        outputs=outputs,
        notes=notes,
        **details,
    )
