"""The placement rules as data: loading placement_rules.yaml, the conditions a rule may name, and the
OS bounds checked against a package's deployment target.

Each rule names its public source and a confidence (high, medium, low); `mlbench rules` lists them so
a reviewer can audit what an estimate rests on.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.backends.apple.analysis.dataflow import WIDE_INTEGERS

if TYPE_CHECKING:
    from mlbench.backends.apple.analysis import LayerInfo, ProgramAnalysis

RULES_PATH = Path(__file__).with_name("placement_rules.yaml")
CONFIDENCE_ORDER = ("low", "medium", "high")
# Releases of one year share a specification version (coremltools converters/mil/_deployment_compatibility.py:
# AvailableTarget.macOS14 = _SPECIFICATION_VERSION_IOS_17, and so on).
_MACOS_TO_IOS = {12: 15, 13: 16, 14: 17, 15: 18, 26: 26}


@dataclass(frozen=True)
class ProgramContext:
    """What a condition may ask about the whole program rather than the operation."""

    compute_ops: int
    flops: int | None
    flexible_input: bool
    os_level: float | None
    """The package's deployment target as an iOS release number (macOS mapped to its iOS year)."""

    @classmethod
    def of(cls, analysis: ProgramAnalysis) -> ProgramContext:
        return cls(compute_ops=len(analysis.layers), flops=analysis.totals.flops,
                   flexible_input=any(i.flexible for i in analysis.inputs),
                   os_level=os_level(analysis.opset_os or analysis.min_os))


@dataclass(frozen=True)
class Rule:
    id: str
    kind: str
    reason: str | None
    source: str
    confidence: str
    ops: frozenset[str] | None = None
    when: dict[str, Any] = field(default_factory=dict)
    os_min: float | None = None
    os_max: float | None = None
    max_ops: int | None = None
    os_text: str | None = None

    def in_os_bounds(self, context: ProgramContext) -> bool:
        """Outside its OS bounds a rule does not apply; with no known deployment target it does."""
        level = context.os_level
        if level is None:
            return True
        return (self.os_min is None or level >= self.os_min) and (self.os_max is None or level <= self.os_max)

    def matches(self, layer: LayerInfo, context: ProgramContext) -> bool:
        if self.ops is not None and layer.op_type not in self.ops:
            return False
        return self.in_os_bounds(context) and all(
            CONDITIONS[name](layer, context, value) for name, value in self.when.items())

    def holds_for_program(self, context: ProgramContext) -> bool:
        return self.in_os_bounds(context) and all(
            PROGRAM_CONDITIONS[name](context, value) for name, value in self.when.items())


def os_level(name: str | None) -> float | None:
    """`iOS17` → 17, `iOS17.4` → 17.4, `macOS14` → 17; None when unknown."""
    match = re.fullmatch(r"(iOS|macOS|watchOS|tvOS|visionOS)(\d+)(?:\.(\d+))?", name or "")
    if not match:
        return None
    major = int(match[2])
    if match[1] == "macOS":
        major = _MACOS_TO_IOS.get(major, major)
    return major + (int(match[3]) / 10 if match[3] else 0.0)


def _any_over(values: Any, limit: float) -> bool:
    return any(isinstance(v, (int, float)) and v > limit for v in (values or []))


def _program_small(context: ProgramContext, at_most: int) -> bool:
    return context.compute_ops <= at_most


Condition = Callable[["LayerInfo", ProgramContext, Any], bool]
CONDITIONS: dict[str, Condition] = {
    "float32_output": lambda layer, _, want: (layer.output_dtype == "fp32") == bool(want),
    "wide_integer_data": lambda layer, _, want: (layer.output_dtype in WIDE_INTEGERS
                                                 or bool(layer.attributes.get("wide_integer_input"))) == bool(want),
    "dilation_over": lambda layer, _, limit: _any_over(layer.attributes.get("dilations"), limit),
    "pool_kernel_over": lambda layer, _, limit: _any_over(layer.attributes.get("kernel_sizes"), limit),
    "pool_stride_over": lambda layer, _, limit: _any_over(layer.attributes.get("strides"), limit),
    "upsample_over": lambda layer, _, limit: _any_over([*(layer.attributes.get("scale_factor_height") or []),
                                                        *(layer.attributes.get("scale_factor_width") or [])], limit),
    "dynamic_shape": lambda layer, _, want: (bool(layer.attributes.get("dynamic_shape"))
                                             or (layer.output_shape is not None and None in layer.output_shape))
    == bool(want),
    "output_dim_over": lambda layer, _, limit: _any_over(layer.output_shape, limit),
    "table_rows_over": lambda layer, _, limit: _any_over([layer.attributes.get("table_rows")], limit),
    "runtime_indices": lambda layer, _, want: bool(layer.attributes.get("runtime_indices")) == bool(want),
    "query_elements_at_most": lambda layer, _, limit: (layer.attributes.get("query_elements") is not None
                                                       and layer.attributes["query_elements"] <= limit),
    "rank": lambda layer, _, rank: layer.output_shape is not None and len(layer.output_shape) == rank,
    "flexible_input": lambda _, context, want: context.flexible_input == bool(want),
    "program_ops_at_most": lambda _, context, limit: _program_small(context, limit),
}
"""Conditions of op rules: (operation, program, the value the rule gives) → does it hold."""

PROGRAM_CONDITIONS: dict[str, Callable[[ProgramContext, Any], bool]] = {
    "program_ops_at_most": _program_small,
    "program_flops_below": lambda context, limit: context.flops is not None and context.flops < limit,
}
"""Conditions of program rules."""


@lru_cache(maxsize=1)
def load_rules() -> dict[str, Rule]:
    """The rule file, checked: every rule has a source and a known confidence and conditions."""
    import yaml

    data = yaml.safe_load(RULES_PATH.read_text(encoding="utf-8"))
    rules = {}
    for item in data["rules"]:
        bounds = item.get("os") or {}
        rule = Rule(
            id=item["id"], kind=item["kind"], reason=item.get("reason") or item.get("says"),
            source=" ".join(str(item["source"]).split()), confidence=item["confidence"],
            ops=frozenset(item["ops"]) if "ops" in item else None, when=dict(item.get("when") or {}),
            os_min=os_level(bounds.get("min")), os_max=os_level(bounds.get("max")), max_ops=item.get("max_ops"),
            os_text=" ".join(f"{k} {v}" for k, v in bounds.items()) or None,
        )
        known = CONDITIONS if rule.kind == "op" else PROGRAM_CONDITIONS
        unknown = [name for name in rule.when if name not in known]
        if unknown or rule.confidence not in CONFIDENCE_ORDER or not rule.source:
            raise ValueError(f"{RULES_PATH.name}: rule {rule.id}: unknown condition {unknown}, "
                             f"confidence {rule.confidence!r} or no source")
        rules[rule.id] = rule
    return rules


def lowest_confidence(rule_ids: set[str]) -> str | None:
    rules = load_rules()
    levels = [rules[r].confidence for r in rule_ids if r in rules]
    return min(levels, key=CONFIDENCE_ORDER.index) if levels else None


def rule_table() -> list[dict[str, str]]:
    """The rules as rows for `mlbench rules`: id, kind, what it applies to, confidence, source."""
    rows = []
    for rule in load_rules().values():
        applies = (", ".join(sorted(rule.ops)) if rule.ops else "every operation" if rule.kind == "op"
                   else "operations on an integer path" if rule.kind == "neighbour" else "program")
        if rule.when:
            applies += " when " + ", ".join(f"{k}={v}" for k, v in rule.when.items())
        if rule.os_text:
            applies += f" ({rule.os_text})"
        rows.append({"id": rule.id, "kind": rule.kind, "applies_to": applies, "confidence": rule.confidence,
                     "says": " ".join(str(rule.reason or "").split()), "source": rule.source})
    return rows
