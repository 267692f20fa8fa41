"""PyTorch module -> Core ML ML program (in memory), by the first of two paths that works:

1. ``torch.jit.trace`` + ``coremltools.convert`` (the most mature path in coremltools);
2. ``torch.export.export(...).run_decompositions({})`` + ``coremltools.convert``, used when tracing
   fails (e.g. a dict output, a failed trace sanity check as in torchvision's ``vit_b_16``), when
   the trace's outputs do not match the module's, or when converting the trace fails.

Tracing runs under ``torch.no_grad()`` (with grad enabled, ``vit_b_16``'s trace fails its sanity
check; without, its trace converts wrongly, so it ends on torch.export either way). Each path's
failure is kept as one short line: the fallback reason, or both reasons in the ExportError.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from mlbench.backends.apple.coremltools_messages import (
    MAX_MESSAGE_CHARS,
    coremltools_captured,
    shorten_coremltools_message,
)
from mlbench.backends.coreml.deployment import ExportError, InvalidExportOptions
from mlbench.backends.coreml.input_types import input_types, needs_input_types
from mlbench.backends.coreml.origins import (
    ORIGINS_KEY,
    encode_origins,
    export_origins,
    mark_export_nodes,
    program_origins,
    trace_node_origins,
)
from mlbench.backends.flexible import dynamic_shapes
from mlbench.backends.source_frames import wrapper_prefix
from mlbench.errors import one_line

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from mlbench.config.models import ModelInput

__all__ = ["EXPORT_PATH_TORCH_EXPORT", "EXPORT_PATH_TRACE", "check_input_names", "convert_module"]

EXPORT_PATH_TRACE = "torch.jit.trace"
EXPORT_PATH_TORCH_EXPORT = "torch.export"
_INPUT_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FAILED_OP_RE = re.compile(r"ERROR - converting '([^']+)' op")


def check_input_names(example_inputs: list[torch.Tensor], input_names: list[str]) -> None:
    """Raise InvalidExportOptions unless there is one valid, distinct Core ML name per input."""
    if len(input_names) != len(example_inputs):
        raise InvalidExportOptions(
            f"{len(example_inputs)} example input(s) but {len(input_names)} input name(s)"
        )
    for name in input_names:
        if not isinstance(name, str) or not _INPUT_NAME_RE.match(name):
            raise InvalidExportOptions(
                f"input name {name!r} is not valid for Core ML (letters, digits, _; not starting with a digit)"
            )
    if len(set(input_names)) != len(input_names):
        raise InvalidExportOptions(f"input names must be distinct: {', '.join(input_names)}")


def convert_options(ct: Any, precision: str, target_name: str) -> dict[str, Any]:
    """The ``coremltools.convert`` arguments both paths share."""
    target = getattr(ct.target, target_name, None)
    if target is None:  # an older coremltools without e.g. iOS26
        raise InvalidExportOptions(
            f"deployment target {target_name} is not supported by coremltools {ct.__version__}"
        )
    return {
        "convert_to": "mlprogram",
        "compute_precision": ct.precision.FLOAT16 if precision == "float16" else ct.precision.FLOAT32,
        "minimum_deployment_target": target,
        "skip_model_load": True,  # loading compiles the model (macOS only); not needed to save it
    }


def convert_module(
    ct: Any, module: torch.nn.Module, example_inputs: list[torch.Tensor], input_names: list[str],
    convert_kwargs: dict[str, Any], sink: list[str], items: list[ModelInput] | None = None,
) -> tuple[Any, str, str | None]:
    """(ML program, the path that made it, why the first path failed or None).

    ``items`` (the pipeline's inputs) give flexible shapes and image inputs (``input_types``); without
    them each input is a tensor of its example's shape. Warnings of the path that made the model land in
    ``sink``. Raises ExportError with a one-line message (and each path's reason) when neither path
    produces a model.
    """
    try:
        mlmodel = _convert_traced(ct, module, example_inputs, input_names, convert_kwargs, sink, items)
        return mlmodel, EXPORT_PATH_TRACE, None
    except _PathFailed as first:
        fallback_reason = one_line(f"{first.stage}: {first.reason}")
        sink.clear()  # warnings from the abandoned path are not about the artifact
        try:
            mlmodel = _convert_exported(ct, module, example_inputs, input_names, convert_kwargs, sink, items)
            return mlmodel, EXPORT_PATH_TORCH_EXPORT, fallback_reason
        except _PathFailed as second:
            # The converter's own complaint (e.g. an op without a converter) is the most useful;
            # prefer the first path's reason when it got as far as conversion.
            if first.stage.startswith("converting"):
                primary, other = first.reason, second.reason
            else:
                primary, other = second.reason, first.reason
            message = f"Core ML export failed: {primary}"
            if other != primary and len(message) < MAX_MESSAGE_CHARS - 30:
                message += f" (other path: {other})"
            raise ExportError(
                message,
                trace_error=f"{first.stage}: {first.reason}",
                export_error=f"{second.stage}: {second.reason}",
            ) from None


class _PathFailed(Exception):
    def __init__(self, stage: str, reason: str) -> None:
        self.stage = stage
        self.reason = reason
        super().__init__(f"{stage}: {reason}")


def _conversion_failure(stage: str, exc: BaseException, messages: list[str]) -> _PathFailed:
    """A _PathFailed for a failed ct.convert, naming the op coremltools was converting if it
    logged one and the exception's message does not already say it."""
    reason = shorten_coremltools_message(exc)
    for message in reversed(messages):
        match = _FAILED_OP_RE.search(message)
        if match:
            if f"'{match.group(1)}'" not in reason:
                reason = one_line(f"op '{match.group(1)}': {reason}")
            break
    return _PathFailed(stage, reason)


def _convert_traced(ct, module, example_inputs, input_names, convert_kwargs, sink, items=None) -> Any:
    import torch

    trace_warnings: list[str] = []
    try:
        with coremltools_captured(trace_warnings), torch.no_grad():
            traced = torch.jit.trace(module, tuple(example_inputs))
    except Exception as exc:  # any trace failure means: try torch.export
        raise _PathFailed("torch.jit.trace failed", shorten_coremltools_message(exc)) from exc
    # A trace whose outputs differ from the module's is wrong, unless torch says the module is
    # random (then differing outputs are expected and the trace is fine).
    nondeterministic = any("Trace had nondeterministic nodes" in m for m in trace_warnings)
    for message in trace_warnings if not nondeterministic else ():
        if "does not match the corresponding output" in message:
            reason = shorten_coremltools_message(message.split(": ", 1)[-1].split(". Detailed error")[0])
            raise _PathFailed("torch.jit.trace failed its check", reason)
    sink.extend(trace_warnings)
    inputs = input_types(ct, input_names, example_inputs, items)
    try:
        with coremltools_captured(sink):
            mlmodel = ct.convert(traced, inputs=inputs, **convert_kwargs)
    except Exception as exc:  # coremltools raises many types: each becomes the variant's one line
        raise _conversion_failure("converting the trace failed", exc, sink) from exc
    _keep_origins(mlmodel, lambda: program_origins(mlmodel, trace_node_origins(traced, module)), sink)
    return mlmodel


def _convert_exported(ct, module, example_inputs, input_names, convert_kwargs, sink, items=None) -> Any:
    import torch

    try:
        with coremltools_captured(sink), torch.no_grad():
            program = torch.export.export(module, tuple(example_inputs),
                                          dynamic_shapes=dynamic_shapes(items, module)).run_decompositions({})
    except Exception as exc:  # torch.export raises many types: each becomes the variant's one line
        raise _PathFailed("torch.export failed", shorten_coremltools_message(exc)) from exc
    by_handle = mark_export_nodes(program, wrapper_prefix(module))
    try:
        with coremltools_captured(sink):
            # coremltools takes the inputs (names, shapes, dtypes) from the ExportedProgram; given ones
            # (flexible shapes, images) must agree with it
            given = input_types(ct, input_names, example_inputs, items) if needs_input_types(items) else None
            mlmodel = ct.convert(program, inputs=given, **convert_kwargs) if given else ct.convert(program, **convert_kwargs)
            _keep_origins(mlmodel, lambda: export_origins(mlmodel, by_handle), sink)
            return _rename_inputs(ct, mlmodel, input_names)
    except Exception as exc:  # coremltools raises many types: each becomes the variant's one line
        raise _conversion_failure("converting the exported program failed", exc, sink) from exc


def _keep_origins(mlmodel: Any, collect: Any, sink: list[str]) -> None:
    """Store each op's module and source line in the package's metadata (``origins``): the saved program
    keeps no scope. A failure to read them costs the names in error reports, never the export."""
    try:
        origins = collect()
    except Exception as exc:  # noqa: BLE001 - coremltools' scopes are internal: never fail the export for them
        sink.append(f"op origins not recorded: {shorten_coremltools_message(exc)}")
        return
    if origins:
        mlmodel.user_defined_metadata[ORIGINS_KEY] = encode_origins(origins)


def _rename_inputs(ct: Any, mlmodel: Any, input_names: list[str]) -> Any:
    spec = mlmodel.get_spec()
    current = [feature.name for feature in spec.description.input]
    if current == list(input_names):
        return mlmodel
    if len(current) != len(input_names):
        raise ValueError(
            f"the exported program has {len(current)} input(s) ({', '.join(current)}), "
            f"expected {len(input_names)}"
        )
    # Two steps, so that swapping names (a->b, b->a) cannot collide.
    for i, old in enumerate(current):
        ct.utils.rename_feature(spec, old, f"__mlbench_in_{i}", rename_outputs=False)
    for i, new in enumerate(input_names):
        ct.utils.rename_feature(spec, f"__mlbench_in_{i}", new, rename_outputs=False)
    return ct.models.MLModel(spec, weights_dir=mlmodel.weights_dir, skip_model_load=True)
