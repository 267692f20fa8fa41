"""Compression in the latency estimate: named, sourced rules (``compression_rules.yaml``) that change one op's
time by how its weights are stored and whether its program quantizes activations, per Neural Engine generation.

``op_adjustment`` gives, for one op on one device of one chip, a factor on its memory bytes, a factor on its
time, whether it runs at the int8 rate, and whether it costs nothing (a quantize/dequantize fused into its
neighbour). ``rule_table`` lists the rules for `mlbench rules`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.backends.apple.chips import GENERATIONS

if TYPE_CHECKING:
    from mlbench.backends.apple.analysis import LayerInfo, ProgramAnalysis
    from mlbench.backends.apple.chips import ChipProfile

RULES_PATH = Path(__file__).with_name("compression_rules.yaml")
QDQ = ("quantize", "dequantize")

__all__ = ["Adjustment", "apple_rule_table", "ios_release", "load_compression_rules", "op_adjustment", "rule_table",
           "sparsity", "variant_kind"]
KINDS = ("float32", "float16", "palettized", "int8 weights", "W8A8", "sparse")  # and "float32 <kind>" for a float32 program


@dataclass(frozen=True)
class Adjustment:
    bytes_factor: float = 1.0
    time_factor: float = 1.0
    flops_factor: float = 1.0
    int8: bool = False
    free: bool = False
    extra_bytes: int = 0
    rules: tuple[str, ...] = ()


@lru_cache(maxsize=1)
def load_compression_rules() -> dict[str, dict[str, Any]]:
    import yaml

    data = yaml.safe_load(RULES_PATH.read_text(encoding="utf-8"))
    return {rule["id"]: rule for rule in data["rules"]}


def rule_table() -> list[dict[str, str]]:
    """The rules as rows for `mlbench rules`."""
    return [{"id": r["id"], "kind": "latency", "applies_to": r["applies_to"], "confidence": r["confidence"],
             "says": " ".join(str(r["says"]).split()), "source": r["source"]}
            for r in load_compression_rules().values()]


def apple_rule_table() -> list[dict[str, str]]:
    """Placement rules and compression rules: everything `mlbench rules` lists for a Core ML target."""
    from mlbench.backends.apple.placement_rules import rule_table as placement_table

    return [*placement_table(), *rule_table()]


def lut_groups(layer: LayerInfo) -> int:
    """Look-up tables of a palettized op's weights (1 per tensor), from its stored bytes: indices take
    params × bits / 8, each table 2^bits float16 entries."""
    storage = layer.weight_storage or ""
    if "lut_to_dense" not in storage or not layer.params or not layer.weight_bytes:
        return 1
    bits = next((b for b in (1, 2, 3, 4, 6, 8) if f"uint{b} " in storage or f"int{b} " in storage), None)
    if bits is None:
        return 1
    table_bytes = layer.weight_bytes - layer.params * bits / 8
    return max(1, round(table_bytes / (2 ** bits * 2)))


def compressed(layer: LayerInfo) -> bool:
    storage = layer.weight_storage or ""
    return any(k in storage for k in ("lut_to_dense", "affine_dequantize", "sparse_to_dense", "shift_scale"))


def variant_kind(analysis: ProgramAnalysis) -> str:
    """What kind of variant a program is, as the order evidence counts kinds (one of KINDS): how its weights are
    stored, whether it quantizes activations, else its precision."""
    if "quantize" in analysis.op_counts:
        return "W8A8"
    storages = " ".join(layer.weight_storage or "" for layer in analysis.layers)
    precision = "float32" if analysis.precision == "FLOAT32" else "float16"
    for marker, kind in (("lut_to_dense", "palettized"), ("sparse_to_dense", "sparse"),
                         ("affine_dequantize", "int8 weights"), ("shift_scale", "int8 weights")):
        if marker in storages:  # a float32 program's compression is a kind of its own: no calibration row has one
            return kind if precision == "float16" else f"float32 {kind}"
    return precision


def ios_release(os_name: str | None) -> int | None:
    """The iOS release number of a program's OS ("iOS17" -> 17, "macOS14" -> 17: macOS N pairs with iOS N + 3 from
    macOS 11 on); None when unknown."""
    import re

    found = re.fullmatch(r"(iOS|macOS)(\d+)", os_name or "")
    if found is None:
        return None
    number = int(found.group(2))
    return number if found.group(1) == "iOS" else number + 3


def sparsity(layer: LayerInfo) -> float | None:
    """The share of zeros in a sparse op's weights, from its stored bytes: float16 non-zero values plus a one-bit
    mask per element (a dense bias counted as non-zero); None when the weights are not plain sparse float16."""
    storage = layer.weight_storage or ""
    if "sparse_to_dense" not in storage or "fp16 nonzero" not in storage or not layer.params or not layer.weight_bytes:
        return None
    return 1.0 - (layer.weight_bytes - layer.params / 8) / (2 * layer.params)


def op_adjustment(layer: LayerInfo, device: str, chip: ChipProfile, w8a8: bool,
                  program_os: str | None = None) -> Adjustment:
    """How compression changes this op's time on `device` of `chip` (`w8a8`: the program quantizes activations;
    `program_os`: the OS its ML program's opset is for, e.g. "iOS17")."""
    rules = load_compression_rules()
    gen = chip.generation_index
    bytes_factor, time_factor, flops_factor, int8, free, extra, applied = 1.0, 1.0, 1.0, False, False, 0, []
    if compressed(layer):
        applied.append("compressed_weights_read_at_stored_size")
        if device == "cpu" and layer.params:  # decompressed at load: read at float16 size
            extra = max(0, 2 * layer.params - (layer.weight_bytes or 0))
        groups = lut_groups(layer)
        if groups > 1:
            rule = rules["grouped_palettization_costs_time"]
            time_factor *= 1 + float(rule["cost_per_doubling"]) * math.log2(groups)
            applied.append(rule["id"])
        if "sparse_to_dense" in (layer.weight_storage or ""):
            skip = rules["high_sparsity_skips_neural_engine_compute"]
            zeros, release = sparsity(layer), ios_release(program_os)
            if (device == "neural_engine" and zeros is not None and release is not None
                    and release >= int(skip["from_os"])
                    and zeros >= float(skip["from_sparsity"]) - float(skip["read_margin"])):
                flops_factor *= float(skip["compute_factor"])
                applied.append(skip["id"])
            else:
                applied.append("sparse_weights_skip_no_compute")
        if "shift_scale" in (layer.weight_storage or "") and device == "gpu":
            applied.append("block_quantized_weights_read_packed_on_gpu")
    if w8a8 and device == "neural_engine":
        path = rules["w8a8_int8_activation_traffic"]
        if gen is not None and gen >= GENERATIONS.index(path["from_generation"]):
            applied.append(path["id"])
            if layer.op_type in QDQ:
                free = True
            bytes_factor *= float(path["bytes_factor"])
            if chip.neural_engine.flops_int8:
                int8 = True
                applied.append("w8a8_int8_compute")
        else:
            applied.append("w8a8_unfused_before_a16")
    return Adjustment(bytes_factor=bytes_factor, time_factor=time_factor, flops_factor=flops_factor, int8=int8,
                      free=free, extra_bytes=extra, rules=tuple(applied))
