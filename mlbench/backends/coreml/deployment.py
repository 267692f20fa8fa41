"""Which deployment targets a Core ML export may have, and which optimization recipes exist: the
rules the pipeline checks before anything is exported (light: no coremltools, no torch).

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
* int8/uint8 per-channel weight quantization and magnitude pruning need only iOS16; 4-bit
  (int4/uint4) and per_block quantization need iOS18 (``linear_quantize_weights`` raises below it:
  ``constexpr_blockwise_shift_scale`` and the 4-bit types are iOS18 ops and types).
* activation quantization (``linear_quantize_activations``) needs iOS17 (its ``quantize`` /
  ``dequantize`` ops are iOS17 ops).
* joint compression (a chain: e.g. prune then palettize, ``joint_compression=True``) needs iOS18,
  and the highest of its steps' needs.
* enumerated shapes on more than one input need iOS18 (``ct.convert``: "Expected a single enumerated
  shape input for deployment targets below iOS 18").
"""

from __future__ import annotations

import re

from mlbench.backends.apple.coremltools_messages import MAX_MESSAGE_CHARS
from mlbench.errors import ReportableError, one_line

__all__ = [
    "ExportError",
    "InvalidExportOptions",
    "check_deployment_target",
    "minimum_deployment_target",
    "shared_deployment_target",
    "valid_deployment_targets",
    "validate_optimization",
]

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
_QUANT_DTYPES = ("int8", "uint8", "int4", "uint4")
_QUANT_MODES = ("linear_symmetric", "linear")
_QUANT_GRANULARITIES = ("per_tensor", "per_channel", "per_block")
_CHAIN_STEPS = ("palettize", "linear_quantize", "prune")


class ExportError(ReportableError):
    """Export failed; ``str(exc)`` is one line of at most ~200 characters, meant for the user.

    ``trace_error`` / ``export_error`` hold the shortened reason each path failed (or None).
    """

    def __init__(
        self, message: str, *, trace_error: str | None = None, export_error: str | None = None
    ) -> None:
        self.trace_error = trace_error
        self.export_error = export_error
        super().__init__(one_line(message, self._limit))

    _limit = MAX_MESSAGE_CHARS


class InvalidExportOptions(ExportError, ValueError):
    """The export options are wrong (unknown or too low deployment target, bad recipe).

    A ``ValueError`` too, so a pydantic validator can raise it unchanged. One line, but not cut
    at 200 characters: the list of valid target names is longer.
    """

    _limit = 400


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
        exclude = optimization.get("exclude", [])
        if not isinstance(exclude, list) or not all(isinstance(e, str) and e for e in exclude):
            raise InvalidExportOptions(f"{kind}: exclude must list module paths or op names, not {exclude!r}")

    if kind == "palettize":
        unknown_keys({"nbits", "mode", "granularity", "group_size", "exclude"})
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
        unknown_keys({"dtype", "mode", "granularity", "block_size", "exclude"})
        if optimization.get("dtype", "int8") not in _QUANT_DTYPES:
            raise bad("dtype", _QUANT_DTYPES)
        if optimization.get("mode", "linear_symmetric") not in _QUANT_MODES:
            raise bad("mode", _QUANT_MODES)
        if optimization.get("granularity", "per_channel") not in _QUANT_GRANULARITIES:
            raise bad("granularity", _QUANT_GRANULARITIES)
        if (optimization.get("granularity") == "per_block") != (optimization.get("block_size") is not None):
            raise InvalidExportOptions("linear_quantize: block_size goes with granularity per_block, and only with it")
    elif kind == "linear_quantize_activations":
        unknown_keys({"weights"})
    elif kind == "chain":
        unknown_keys({"steps"})
        steps = optimization.get("steps")
        if not isinstance(steps, list) or len(steps) < 2:
            raise InvalidExportOptions("chain: steps must list at least two recipes")
        for step in steps:
            if not isinstance(step, dict) or step.get("kind") not in _CHAIN_STEPS:
                raise InvalidExportOptions(f"chain: each step is a {', '.join(_CHAIN_STEPS)} recipe, not "
                                           f"{step.get('kind') if isinstance(step, dict) else step!r}")
            validate_optimization(step)
    elif kind == "prune":
        unknown_keys({"target_sparsity", "exclude"})
        sparsity = optimization.get("target_sparsity")
        if (
            not isinstance(sparsity, (int, float))
            or isinstance(sparsity, bool)
            or not 0.0 <= float(sparsity) <= 1.0
        ):
            raise InvalidExportOptions(f"prune: target_sparsity must be a number in [0, 1], not {sparsity!r}")
    else:
        raise InvalidExportOptions(
            f"unknown optimization kind {kind!r}; valid: palettize, linear_quantize, prune, "
            "linear_quantize_activations, chain"
        )


def _validate_precision(precision: str) -> None:
    if precision not in ("float32", "float16"):
        raise InvalidExportOptions(f"precision must be float32 or float16, not {precision!r}")


def _requirement(precision: str, optimization: dict | None, enumerated_inputs: int = 0) -> tuple[int, str]:
    """(iOS level, why) — the lowest target the options need and the option that needs it."""
    _validate_precision(precision)
    validate_optimization(optimization)
    level, why = 15, f"an ML program ({precision})"
    if optimization is not None:
        level, why = _recipe_requirement(optimization)
    if enumerated_inputs > 1 and level < 18:
        # coremltools: "Expected a single enumerated shape input for deployment targets below iOS 18"
        level, why = 18, f"enumerated shapes on {enumerated_inputs} inputs"
    return level, why


def _recipe_requirement(optimization: dict) -> tuple[int, str]:
    kind = optimization["kind"]
    if kind == "chain":
        steps = [_recipe_requirement(step) for step in optimization["steps"]]
        return max([(18, "joint compression (chain)"), *steps], key=lambda lw: lw[0])
    if kind == "palettize":
        if optimization.get("granularity", "per_tensor") == "per_grouped_channel":
            return 18, "palettize per_grouped_channel"
        if optimization["nbits"] == 3:
            return 18, "palettize nbits=3"
    if kind == "linear_quantize":
        if optimization.get("dtype", "int8") in ("int4", "uint4"):
            return 18, f"linear_quantize {optimization['dtype']}"
        if optimization.get("granularity") == "per_block":
            return 18, "linear_quantize per_block"
    if kind == "linear_quantize_activations":
        return 17, "linear_quantize_activations"
    return 16, kind


def minimum_deployment_target(precision: str, optimization: dict | None, enumerated_inputs: int = 0) -> str:
    """The lowest deployment target the options need, as an iOS name ("iOS15", "iOS16", "iOS18")."""
    return _LEVEL_TO_IOS[_requirement(precision, optimization, enumerated_inputs)[0]]


def shared_deployment_target(
    precision: str, optimization: dict | None, siblings: list[tuple[str, dict | None]], enumerated_inputs: int = 0
) -> str:
    """The lowest target every variant of a model in one sweep target needs, as an iOS name.

    Variants of one model then differ only in what the sweep varies: coremltools gives a float16 program
    float16 inputs and outputs from iOS16 on, and float32 ones cast on the CPU before (a device switch
    the estimate counts), so per-variant minimums would credit palettization with a cast it did not
    remove. A sibling whose own options are invalid is left out here; its own export says why.
    """
    level = _requirement(precision, optimization, enumerated_inputs)[0]
    for sibling_precision, sibling_optimization in siblings:
        try:
            level = max(level, _requirement(sibling_precision, sibling_optimization, enumerated_inputs)[0])
        except InvalidExportOptions:
            continue
    return _LEVEL_TO_IOS[level]


def check_deployment_target(
    deployment_target: str | None, precision: str, optimization: dict | None, enumerated_inputs: int = 0
) -> str:
    """The canonical target name to use: ``deployment_target`` checked, or the minimum if None.

    Raises InvalidExportOptions for an unknown name or one lower than the options need.
    """
    level, why = _requirement(precision, optimization, enumerated_inputs)
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
