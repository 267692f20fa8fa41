"""Export a PyTorch module to a Core ML ML program (``.mlpackage``), optionally weight-compressed.

Two export paths are tried in order:

1. ``torch.jit.trace`` + ``coremltools.convert`` (the most mature path in coremltools);
2. ``torch.export.export(...).run_decompositions({})`` + ``coremltools.convert``, used when tracing
   fails (e.g. a dict output, a failed trace sanity check as in torchvision's ``vit_b_16``), when
   the trace's outputs do not match the module's, or when converting the trace fails.

Tracing runs under ``torch.no_grad()`` (with grad enabled, ``vit_b_16``'s trace fails its sanity
check; without, its trace converts wrongly, so it ends on torch.export either way).

coremltools' log warnings, Python warnings and tqdm progress bars are captured while exporting
(``sys.stderr`` is redirected meanwhile, process-wide) and returned, shortened and deduplicated,
in ``ExportResult.warnings``.

The compute units are not an export option (Core ML picks them when the model is loaded), so they
do not appear here. Works on Linux: conversion, weight compression and saving need no macOS.

Deployment-target rules (coremltools 9.0, verified in its source):

* ML program needs iOS15/macOS12/watchOS8/tvOS15 (``converters/_converters_entry.py``,
  ``_determine_target``); float16 compute precision is ML-program only, so it needs the same.
* Every weight-compression pass (palettize, linear quantize, prune) needs iOS16: below that
  coremltools *silently skips* the pass (``optimize/coreml/_quantization_passes.py``,
  ``AbstractCompressionPass._MINIMUM_OPSET_VERSION = iOS16``), so a lower target is refused here.
* ``per_grouped_channel`` palettization needs iOS18 (``palettize_weights.transform_op`` raises
  below iOS18); 3-bit palettization needs iOS18 because the iOS16 ``constexpr_lut_to_dense`` op
  only takes LUTs of 2, 4, 16, 64 or 256 entries (1, 2, 4, 6, 8 bits;
  ``converters/mil/mil/ops/defs/iOS16/constexpr_ops.py``).
* int8/uint8 per-channel weight quantization and magnitude pruning need only iOS16
  (4-bit and per-block quantization would need iOS18; not offered here).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.backends.capture import captured
from mlbench.errors import ReportableError

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "EXPORT_PATH_TORCH_EXPORT",
    "EXPORT_PATH_TRACE",
    "ExportError",
    "ExportResult",
    "InvalidExportOptions",
    "MAX_MESSAGE_CHARS",
    "PACKAGE_NAME",
    "check_deployment_target",
    "export_coreml",
    "import_coremltools",
    "minimum_deployment_target",
    "shorten_coremltools_message",
    "valid_deployment_targets",
    "validate_optimization",
]

EXPORT_PATH_TRACE = "torch.jit.trace"
EXPORT_PATH_TORCH_EXPORT = "torch.export"
PACKAGE_NAME = "model.mlpackage"
MAX_MESSAGE_CHARS = 200
METADATA_PREFIX = "mlbench."

# Deployment targets an ML program can have, each with its iOS generation
# (coremltools' ct.target aliases: macOS12 == iOS15, watchOS8 == iOS15, tvOS15 == iOS15, ...).
_TARGET_LEVELS: dict[str, int] = {}
for _family, _names in (
    ("iOS", ("15", "16", "17", "18", "26")),
    ("macOS", ("12", "13", "14", "15", "26")),
    ("watchOS", ("8", "9", "10", "11", "26")),
    ("tvOS", ("15", "16", "17", "18", "26")),
):
    for _ios_level, _suffix in zip((15, 16, 17, 18, 26), _names):
        _TARGET_LEVELS[f"{_family}{_suffix}"] = _ios_level
_LEVEL_TO_IOS = {level: f"iOS{level}" for level in (15, 16, 17, 18, 26)}

_PALETTIZE_NBITS = (1, 2, 3, 4, 6, 8)
_PALETTIZE_MODES = ("kmeans", "uniform")
_PALETTIZE_GRANULARITIES = ("per_tensor", "per_grouped_channel")
_QUANT_DTYPES = ("int8", "uint8")
_QUANT_MODES = ("linear_symmetric", "linear")
_INPUT_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ExportError(ReportableError):
    """Export failed; ``str(exc)`` is one line of at most ~200 characters, meant for the user.

    ``trace_error`` / ``export_error`` hold the shortened reason each path failed (or None).
    """

    def __init__(
        self, message: str, *, trace_error: str | None = None, export_error: str | None = None
    ) -> None:
        self.trace_error = trace_error
        self.export_error = export_error
        super().__init__(_one_line(message, self._limit))

    _limit = MAX_MESSAGE_CHARS


class InvalidExportOptions(ExportError, ValueError):
    """The export options are wrong (unknown or too low deployment target, bad recipe).

    A ``ValueError`` too, so a pydantic validator can raise it unchanged. One line, but not cut
    at 200 characters: the list of valid target names is longer.
    """

    _limit = 400


@dataclass
class ExportResult:
    artifact: Path  # the saved .mlpackage
    export_path: str  # "torch.jit.trace" or "torch.export"
    deployment_target: str  # the one used, e.g. "iOS16"
    seconds: float  # wall time of trace/export + convert (both paths if it fell back) + compress + save
    fallback_reason: str | None  # short reason the first path failed, if it did
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Options: deployment targets and optimization recipes


def valid_deployment_targets() -> list[str]:
    """The deployment-target names accepted, lowest first within each OS family."""
    return list(_TARGET_LEVELS)


def _canonical_target(name: str) -> str:
    if isinstance(name, str):
        for known in _TARGET_LEVELS:
            if known.lower() == name.strip().lower():
                return known
    raise InvalidExportOptions(
        f"unknown deployment target {name!r}; valid: {', '.join(_TARGET_LEVELS)}"
    )


def validate_optimization(optimization: dict | None) -> None:
    """Raise InvalidExportOptions when ``optimization`` is not one of the supported recipes."""
    if optimization is None:
        return
    if not isinstance(optimization, dict):
        raise InvalidExportOptions(f"optimization must be a dict or None, not {type(optimization).__name__}")
    kind = optimization.get("kind")

    def bad(key: str, allowed: tuple) -> InvalidExportOptions:
        return InvalidExportOptions(
            f"{kind}: {key} must be one of {', '.join(map(str, allowed))}, not {optimization.get(key)!r}"
        )

    def unknown_keys(allowed: set[str]) -> None:
        extra = sorted(set(optimization) - allowed - {"kind"})
        if extra:
            raise InvalidExportOptions(f"{kind}: unknown key(s) {', '.join(extra)}")

    if kind == "palettize":
        unknown_keys({"nbits", "mode", "granularity", "group_size"})
        if optimization.get("nbits") not in _PALETTIZE_NBITS:
            raise bad("nbits", _PALETTIZE_NBITS)
        if optimization.get("mode", "kmeans") not in _PALETTIZE_MODES:
            raise bad("mode", _PALETTIZE_MODES)
        granularity = optimization.get("granularity", "per_tensor")
        if granularity not in _PALETTIZE_GRANULARITIES:
            raise bad("granularity", _PALETTIZE_GRANULARITIES)
        group_size = optimization.get("group_size")
        if granularity == "per_grouped_channel":
            if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size < 1:
                raise InvalidExportOptions(
                    f"palettize: group_size must be a positive integer with per_grouped_channel, not {group_size!r}"
                )
        elif group_size is not None:
            raise InvalidExportOptions("palettize: group_size is only allowed with per_grouped_channel")
    elif kind == "linear_quantize":
        unknown_keys({"dtype", "mode"})
        if optimization.get("dtype", "int8") not in _QUANT_DTYPES:
            raise bad("dtype", _QUANT_DTYPES)
        if optimization.get("mode", "linear_symmetric") not in _QUANT_MODES:
            raise bad("mode", _QUANT_MODES)
    elif kind == "prune":
        unknown_keys({"target_sparsity"})
        sparsity = optimization.get("target_sparsity")
        if (
            not isinstance(sparsity, (int, float))
            or isinstance(sparsity, bool)
            or not 0.0 <= float(sparsity) <= 1.0
        ):
            raise InvalidExportOptions(f"prune: target_sparsity must be a number in [0, 1], not {sparsity!r}")
    else:
        raise InvalidExportOptions(
            f"unknown optimization kind {kind!r}; valid: palettize, linear_quantize, prune"
        )


def _validate_precision(precision: str) -> None:
    if precision not in ("float32", "float16"):
        raise InvalidExportOptions(f"precision must be float32 or float16, not {precision!r}")


def _requirement(precision: str, optimization: dict | None) -> tuple[int, str]:
    """(iOS level, why) — the lowest target the options need and the option that needs it."""
    _validate_precision(precision)
    validate_optimization(optimization)
    level, why = 15, f"an ML program ({precision})"
    if optimization is not None:
        kind = optimization["kind"]
        level, why = 16, kind
        if kind == "palettize":
            if optimization.get("granularity", "per_tensor") == "per_grouped_channel":
                level, why = 18, "palettize per_grouped_channel"
            elif optimization["nbits"] == 3:
                level, why = 18, "palettize nbits=3"
    return level, why


def minimum_deployment_target(precision: str, optimization: dict | None) -> str:
    """The lowest deployment target the options need, as an iOS name ("iOS15", "iOS16", "iOS18")."""
    return _LEVEL_TO_IOS[_requirement(precision, optimization)[0]]


def check_deployment_target(
    deployment_target: str | None, precision: str, optimization: dict | None
) -> str:
    """The canonical target name to use: ``deployment_target`` checked, or the minimum if None.

    Raises InvalidExportOptions for an unknown name or one lower than the options need.
    """
    level, why = _requirement(precision, optimization)
    if deployment_target is None:
        return _LEVEL_TO_IOS[level]
    name = _canonical_target(deployment_target)
    if _TARGET_LEVELS[name] < level:
        family = re.match(r"[A-Za-z]+", name).group(0)  # type: ignore[union-attr]
        lowest = next(n for n, lv in _TARGET_LEVELS.items() if lv == level and n.startswith(family))
        raise InvalidExportOptions(
            f"deployment target {name} is too low for {why}: it needs {lowest} or later"
        )
    return name


# ---------------------------------------------------------------------------------------------
# Messages


def _one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


_FX_UNSUPPORTED_RE = re.compile(r"Unsupported fx node (\S+?), kind (\S+)")


def shorten_coremltools_message(exc: BaseException | str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """One line (≤ ``limit`` chars) that says what went wrong, without tracebacks or op dumps.

    Keeps the first meaningful line; when that line only announces a list ("...!" or "...:"),
    the next line is kept too (e.g. "Tracing failed sanity checks! ERROR: Graphs differed
    across invocations!").
    """
    raw = exc if isinstance(exc, str) else str(exc)
    if not isinstance(exc, str) and isinstance(exc, KeyError) and len(exc.args) == 1:
        raw = str(exc.args[0])  # KeyError's str() adds quotes
    lines = [line for line in raw.splitlines() if line.strip()]
    # Drop traceback blocks that some libraries embed in the message.
    lines = [
        line
        for line in lines
        if not line.startswith(("Traceback (most recent call last)", "  File \"", "    "))
    ] or lines
    if not lines:
        name = type(exc).__name__ if not isinstance(exc, str) else "error"
        return name
    text = lines[0].strip()
    if len(lines) > 1 and text.endswith(("!", ":")) and not lines[1][:1].isspace():
        text = f"{text} {lines[1].strip()}"
    match = _FX_UNSUPPORTED_RE.search(text)
    if match:
        text = f"PyTorch convert function for op '{match.group(2)}' not implemented (torch.export graph)"
    if not isinstance(exc, str) and text in ("", "None"):
        text = type(exc).__name__
    return _one_line(text, limit)


# ---------------------------------------------------------------------------------------------
# Capturing coremltools' and torch's noise

# Import-time messages that say nothing about the user's model on Linux / with our usage.
_DROP_PATTERNS = (
    re.compile(r"^Failed to load _ML\w*Proxy"),
    re.compile(r"^Failed to load '_ML\w*Proxy'"),
    re.compile(r"^scikit-learn version .* Disabling scikit-learn conversion API"),
    re.compile(r"torch\.jit\.trace(_method)? ?` is deprecated"),
    re.compile(r"^ERROR - converting '"),  # logged before raising; _failed_op() uses it
    re.compile(r"^DeprecationWarning: "),  # coremltools/torch internals, not the user's business
    re.compile(r"^When both 'convert_to' and 'minimum_deployment_target' not specified"),
    re.compile(r"^ResourceWarning: Implicitly cleaning up"),  # coremltools' temporary weight dirs
    re.compile(r"^Output, '.*', of the source model, has been renamed to"),  # names are in the spec
    re.compile(r"has not been tested with coremltools"),  # replaced by _version_warning()
)
_import_messages: list[str] = []
_ct_module: Any = None


def _captured(sink: list[str]) -> Any:
    """coremltools' log warnings, Python warnings and progress bars, collected into ``sink``."""
    return captured(sink, ["coremltools"])


def _clean_warnings(messages: list[str]) -> list[str]:
    out: list[str] = []
    for message in messages:
        message = message.strip()
        if message.startswith("UserWarning: "):
            message = message[len("UserWarning: "):]
        if any(p.search(message) for p in _DROP_PATTERNS):
            continue
        short = shorten_coremltools_message(message)
        if short and short not in out:
            out.append(short)
    return out


def _version_warning(ct: Any) -> list[str]:
    """coremltools' "Torch version X has not been tested" warning, once per result.

    coremltools logs it only when it is first imported (possibly by someone else), so it is
    recomputed here from the same numbers.
    """
    try:
        import torch
        from packaging.version import Version

        newest = getattr(ct._deps, "_TORCH_MAX_VERSION", None)
        current = re.match(r"\d+\.\d+\.\d+", torch.__version__)
        if newest and current and Version(current.group(0)) > Version(newest):
            return [
                f"torch {current.group(0)} has not been tested with coremltools {ct.__version__} "
                f"(newest tested: torch {newest})"
            ]
    except Exception:  # pragma: no cover - only a warning
        pass
    return []


def import_coremltools() -> Any:
    """Import coremltools once, keeping its import-time log lines out of the user's terminal."""
    global _ct_module
    if _ct_module is None:
        messages: list[str] = []
        with _captured(messages):
            import coremltools as ct
            import coremltools.optimize.coreml  # noqa: F401
        _import_messages.extend(_clean_warnings(messages))
        _ct_module = ct
    return _ct_module


# ---------------------------------------------------------------------------------------------
# Conversion


class _PathFailed(Exception):
    def __init__(self, stage: str, reason: str) -> None:
        self.stage = stage
        self.reason = reason
        super().__init__(f"{stage}: {reason}")


_FAILED_OP_RE = re.compile(r"ERROR - converting '([^']+)' op")


def _conversion_failure(stage: str, exc: BaseException, messages: list[str]) -> _PathFailed:
    """A _PathFailed for a failed ct.convert, naming the op coremltools was converting if it
    logged one and the exception's message does not already say it."""
    reason = shorten_coremltools_message(exc)
    for message in reversed(messages):
        match = _FAILED_OP_RE.search(message)
        if match:
            if f"'{match.group(1)}'" not in reason:
                reason = _one_line(f"op '{match.group(1)}': {reason}")
            break
    return _PathFailed(stage, reason)


def _tensor_type(ct: Any, name: str, tensor: "torch.Tensor") -> Any:
    import numpy as np
    import torch

    dtype = None
    if tensor.dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        dtype = np.int32
    elif tensor.dtype == torch.bool:
        dtype = np.bool_
    # float inputs: coremltools' default (float32, or float16 for float16 programs at iOS16+).
    return ct.TensorType(name=name, shape=tuple(tensor.shape), dtype=dtype)


def _convert_traced(ct, module, example_inputs, input_names, convert_kwargs, sink) -> Any:
    import torch

    trace_warnings: list[str] = []
    try:
        with _captured(trace_warnings), torch.no_grad():
            traced = torch.jit.trace(module, tuple(example_inputs))
    except Exception as exc:  # noqa: BLE001 - any trace failure means: try torch.export
        raise _PathFailed("torch.jit.trace failed", shorten_coremltools_message(exc)) from exc
    # A trace whose outputs differ from the module's is wrong, unless torch says the module is
    # random (then differing outputs are expected and the trace is fine).
    nondeterministic = any("Trace had nondeterministic nodes" in m for m in trace_warnings)
    for message in trace_warnings if not nondeterministic else ():
        if "does not match the corresponding output" in message:
            reason = shorten_coremltools_message(message.split(": ", 1)[-1].split(". Detailed error")[0])
            raise _PathFailed("torch.jit.trace failed its check", reason)
    sink.extend(trace_warnings)
    inputs = [_tensor_type(ct, n, t) for n, t in zip(input_names, example_inputs)]
    try:
        with _captured(sink):
            return ct.convert(traced, inputs=inputs, **convert_kwargs)
    except Exception as exc:  # noqa: BLE001
        raise _conversion_failure("converting the trace failed", exc, sink) from exc


def _convert_exported(ct, module, example_inputs, input_names, convert_kwargs, sink) -> Any:
    import torch

    try:
        with _captured(sink), torch.no_grad():
            program = torch.export.export(module, tuple(example_inputs)).run_decompositions({})
    except Exception as exc:  # noqa: BLE001
        raise _PathFailed("torch.export failed", shorten_coremltools_message(exc)) from exc
    try:
        with _captured(sink):
            # coremltools takes the inputs (names, shapes, dtypes) from the ExportedProgram and
            # rejects an ``inputs`` argument for it.
            mlmodel = ct.convert(program, **convert_kwargs)
            return _rename_inputs(ct, mlmodel, input_names)
    except Exception as exc:  # noqa: BLE001
        raise _conversion_failure("converting the exported program failed", exc, sink) from exc


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


def _compress(ct: Any, mlmodel: Any, optimization: dict) -> Any:
    cto = ct.optimize.coreml
    kind = optimization["kind"]
    if kind == "palettize":
        granularity = optimization.get("granularity", "per_tensor")
        kwargs: dict[str, Any] = {
            "mode": optimization.get("mode", "kmeans"),
            "nbits": optimization["nbits"],
            "granularity": granularity,
        }
        if granularity == "per_grouped_channel":
            kwargs["group_size"] = optimization["group_size"]
        config = cto.OptimizationConfig(global_config=cto.OpPalettizerConfig(**kwargs))
        return cto.palettize_weights(mlmodel, config)
    if kind == "linear_quantize":
        config = cto.OptimizationConfig(
            global_config=cto.OpLinearQuantizerConfig(
                mode=optimization.get("mode", "linear_symmetric"),
                dtype=optimization.get("dtype", "int8"),
            )
        )
        return cto.linear_quantize_weights(mlmodel, config)
    if kind == "prune":
        config = cto.OptimizationConfig(
            global_config=cto.OpMagnitudePrunerConfig(target_sparsity=float(optimization["target_sparsity"]))
        )
        return cto.prune_weights(mlmodel, config)
    raise InvalidExportOptions(f"unknown optimization kind {kind!r}")  # validated earlier


def _ml_program_op_types(spec: Any) -> list[str]:
    """Every op type in the ML program's functions (nested blocks included)."""
    types: list[str] = []

    def walk(block: Any) -> None:
        for op in block.operations:
            types.append(op.type)
            for inner in op.blocks:
                walk(inner)

    for function in spec.mlProgram.functions.values():
        for block in function.block_specializations.values():
            walk(block)
    return types


def export_coreml(
    module: "torch.nn.Module",
    example_inputs: list["torch.Tensor"],
    input_names: list[str],
    *,
    precision: str,
    optimization: dict | None,
    deployment_target: str | None,
    dest: Path,
) -> ExportResult:
    """Convert ``module`` to an ML program and save it as ``dest/model.mlpackage``.

    Raises InvalidExportOptions (a ValueError) for bad options, before any work is done, and
    ExportError with a one-line message when neither export path produces a model.
    """
    target_name = check_deployment_target(deployment_target, precision, optimization)
    example_inputs = list(example_inputs)
    input_names = list(input_names)
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

    ct = import_coremltools()  # once per process; not part of the export's time
    started = time.perf_counter()
    target = getattr(ct.target, target_name, None)
    if target is None:  # an older coremltools without e.g. iOS26
        raise InvalidExportOptions(
            f"deployment target {target_name} is not supported by coremltools {ct.__version__}"
        )
    convert_kwargs = dict(
        convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT16 if precision == "float16" else ct.precision.FLOAT32,
        minimum_deployment_target=target,
        skip_model_load=True,  # loading compiles the model (macOS only); not needed to save it
    )

    module = module.eval()
    sink: list[str] = []
    fallback_reason: str | None = None
    try:
        mlmodel = _convert_traced(ct, module, example_inputs, input_names, convert_kwargs, sink)
        export_path = EXPORT_PATH_TRACE
    except _PathFailed as first:
        fallback_reason = _one_line(f"{first.stage}: {first.reason}")
        sink.clear()  # warnings from the abandoned path are not about the artifact
        try:
            mlmodel = _convert_exported(ct, module, example_inputs, input_names, convert_kwargs, sink)
            export_path = EXPORT_PATH_TORCH_EXPORT
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

    if optimization is not None:
        before = _ml_program_op_types(mlmodel.get_spec())
        try:
            with _captured(sink):
                mlmodel = _compress(ct, mlmodel, optimization)
        except InvalidExportOptions:
            raise
        except Exception as exc:  # noqa: BLE001
            raise ExportError(
                f"{optimization['kind']} failed: {shorten_coremltools_message(exc)}"
            ) from None
        after = _ml_program_op_types(mlmodel.get_spec())
        if sum(t.startswith("constexpr_") for t in after) <= sum(t.startswith("constexpr_") for t in before):
            sink.append(
                f"{optimization['kind']} compressed no weights (only tensors over 2048 elements are compressed)"
            )

    metadata = {
        "precision": precision,
        "export_path": export_path,
        "deployment_target": target_name,
        "optimization": json.dumps(optimization, sort_keys=True) if optimization is not None else "none",
        "fallback_reason": fallback_reason or "",
        "input_names": ",".join(input_names),
        "torch_version": _torch_version(),
        "coremltools_version": str(ct.__version__),
    }
    try:
        from mlbench import __version__ as mlbench_version
    except Exception:  # pragma: no cover
        mlbench_version = "unknown"
    metadata["version"] = str(mlbench_version)
    for key, value in metadata.items():
        mlmodel.user_defined_metadata[METADATA_PREFIX + key] = value
    mlmodel.short_description = f"mlbench export ({export_path}, {precision}, {target_name})"

    dest = Path(dest)
    artifact = dest / PACKAGE_NAME
    try:
        dest.mkdir(parents=True, exist_ok=True)
        if artifact.exists():
            shutil.rmtree(artifact) if artifact.is_dir() else artifact.unlink()
        with _captured(sink):
            mlmodel.save(str(artifact))
    except OSError as exc:
        raise ExportError(f"cannot write {artifact}: {exc.strerror or exc}") from None

    return ExportResult(
        artifact=artifact,
        export_path=export_path,
        deployment_target=target_name,
        seconds=time.perf_counter() - started,
        fallback_reason=fallback_reason,
        warnings=_version_warning(ct) + _clean_warnings(_import_messages + sink),
    )


def _torch_version() -> str:
    import torch

    return str(torch.__version__)
