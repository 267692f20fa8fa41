"""Export a PyTorch module to one self-contained ``.onnx`` file, float32 or float16.

Export paths, tried in order (the artifact's metadata records which one made it, and why the first
failed):

1. ``torch.onnx.export(..., dynamo=True)``: torch.export + ONNX Script translation + the exporter's
   graph optimizer (needs the ``onnxscript`` package);
2. ``torch.onnx.export(..., dynamo=False)``: the TorchScript exporter, used when the first raises,
   or gives a graph with another number of outputs than the module has.

Weights are kept inside the file (``external_data=False``), so the artifact is one file that is
hashed and cached as such; models over protobuf's 2 GB limit cannot be exported this way.

float16: the float32 export is converted by ONNX Runtime's own converter,
``onnxruntime.transformers.float16.convert_float_to_float16(model, keep_io_types=True)``: every
float initializer and op becomes float16 (except that converter's default block list of ops, which
stay float32 behind Casts), while the graph's inputs and outputs stay float32 so every variant
of a model takes the same inputs and is compared on the same outputs. On the CPU provider, ONNX
Runtime runs float16 nodes that have no float16 CPU kernel in float32 behind Casts it inserts; the
profile shows which (see profile.py).

The exporter's console output is silenced and its warnings are returned in
``OnnxExportResult.warnings``, shortened and deduplicated.
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.backends.capture import captured, distinct_lines
from mlbench.errors import ReportableError, first_line

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from mlbench.config.models import ModelInput

EXPORT_PATH_DYNAMO = "torch.onnx.export(dynamo=True)"
EXPORT_PATH_TORCHSCRIPT = "torch.onnx.export(dynamo=False)"
FLOAT16_CONVERSION = "onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True)"
MODEL_NAME = "model.onnx"
MAX_MESSAGE_CHARS = 200


class OnnxExportError(ReportableError):
    """Both export paths failed: the message names each path's first error line."""


@dataclass
class OnnxExportResult:
    artifact: Path
    export_path: str
    fallback_reason: str | None
    opset: int | None
    seconds: float
    float16_conversion: str | None = None
    warnings: list[str] = field(default_factory=list)


_first_line = functools.partial(first_line, limit=MAX_MESSAGE_CHARS, cause=True, comments=False)
"""A failure's line as ONNX Runtime's exporter says it: of the root cause, without its `#` hint lines."""


def _captured(sink: list[str]) -> Any:
    """The exporters' log warnings and Python warnings, collected; what they print, silenced."""
    return captured(sink, ["torch.onnx", "torch.export", "onnxscript", "onnx_ir"], stdout=True)


def _export(module: torch.nn.Module, args: tuple, path: Path, *, dynamo: bool, input_names: Sequence[str],
            output_names: Sequence[str], opset: int | None, items: list[ModelInput] | None = None) -> None:
    import torch

    from mlbench.backends.flexible import dynamic_axes, dynamic_shapes

    kwargs: dict[str, Any] = {"input_names": list(input_names), "output_names": list(output_names),
                              "opset_version": opset, "dynamo": dynamo}
    if dynamo:
        kwargs.update(external_data=False, verbose=False)
        shapes = dynamic_shapes(items, module)
        if shapes is not None:
            kwargs["dynamic_shapes"] = shapes
    else:
        axes = dynamic_axes(items)
        if axes is not None:
            kwargs["dynamic_axes"] = axes
    with torch.no_grad():
        torch.onnx.export(module, args, str(path), **kwargs)


def _check_outputs(path: Path, expected_outputs: int) -> Any:
    import onnx

    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    got = len(model.graph.output)
    if got != expected_outputs:
        raise ValueError(f"the exported graph has {got} outputs; the module returns {expected_outputs}")
    return model


def graph_opset(model: Any) -> int | None:
    """The default-domain opset a loaded ModelProto declares."""
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def export_onnx(
    module: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    input_names: Sequence[str],
    output_names: Sequence[str],
    *,
    precision: str,
    opset: int | None,
    dest: Path,
    inputs: list[ModelInput] | None = None,
) -> OnnxExportResult:
    """Write ``dest/model.onnx``; raise OnnxExportError (one line per path) when no path works.

    ``inputs`` (the pipeline's input specs) make their flexible dimensions dynamic axes: one file for
    every shape."""
    if precision not in ("float32", "float16"):
        raise ValueError(f"unsupported precision {precision!r}")
    import onnx

    path = dest / MODEL_NAME
    messages: list[str] = []
    failures: list[str] = []
    short: list[str] = []  # the same reasons, cut so that both fit on one report line
    export_path = None
    model = None
    t0 = time.perf_counter()
    for dynamo, name, label in ((True, EXPORT_PATH_DYNAMO, "dynamo exporter"),
                                (False, EXPORT_PATH_TORCHSCRIPT, "TorchScript exporter")):
        path.unlink(missing_ok=True)
        try:
            with _captured(messages):
                _export(module, tuple(example_inputs), path, dynamo=dynamo, input_names=input_names,
                        output_names=output_names, opset=opset, items=inputs)
                model = _check_outputs(path, len(output_names))
        except Exception as exc:  # noqa: BLE001 - every exporter error is a reason to try the next path
            failures.append(f"{name}: {_first_line(exc)}")
            short.append(f"{label}: {_first_line(exc, limit=115)}")
            continue
        export_path = name
        break
    for leftover in dest.iterdir():  # the cache takes exactly one file: drop anything a failed path left
        if leftover.name != MODEL_NAME:
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    if export_path is None or model is None:
        path.unlink(missing_ok=True)
        raise OnnxExportError("ONNX export failed: " + "; ".join(short))
    conversion = None
    if precision == "float16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        with _captured(messages):
            model = convert_float_to_float16(model, keep_io_types=True)
        onnx.save(model, str(path))
        conversion = FLOAT16_CONVERSION
    return OnnxExportResult(
        artifact=path, export_path=export_path, fallback_reason=failures[0] if failures else None,
        opset=graph_opset(model), seconds=time.perf_counter() - t0, float16_conversion=conversion,
        warnings=distinct_lines(messages, _first_line),
    )


def graph_summary(path: Path) -> dict[str, Any]:
    """What the saved graph holds: nodes by op type, constants (initializers and Constant nodes) apart."""
    import numpy as np
    import onnx
    from onnx import helper

    model = onnx.load(str(path))
    graph = model.graph
    op_counts: dict[str, int] = {}
    constant_nodes = 0
    for node in graph.node:
        if node.op_type == "Constant":
            constant_nodes += 1
            continue
        op_counts[node.op_type] = op_counts.get(node.op_type, 0) + 1
    params = 0
    weight_bytes = 0
    dtypes: dict[str, int] = {}
    for init in graph.initializer:
        count = int(np.prod(init.dims)) if init.dims else 1
        dtype = helper.tensor_dtype_to_np_dtype(init.data_type)
        name = np.dtype(dtype).name
        dtypes[name] = dtypes.get(name, 0) + count
        if np.issubdtype(dtype, np.floating):
            params += count
        weight_bytes += count * np.dtype(dtype).itemsize
    return {
        "opset": graph_opset(model),
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "compute_nodes": sum(op_counts.values()),
        "op_counts": dict(sorted(op_counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        "initializers": len(graph.initializer),
        "constant_nodes": constant_nodes,
        "params": params,
        "weight_bytes": weight_bytes,
        "weight_elements_by_dtype": dtypes,
        "inputs": [i.name for i in graph.input],
        "outputs": [o.name for o in graph.output],
    }
