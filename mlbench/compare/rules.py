"""Gate rules (pytest-benchmark style, `METRIC:THRESHOLD`): parsing and their meaning, shared by
`mlbench compare`, `mlbench ab` and the pipeline's `report.gate`. See `mlbench.compare.comparison`
for how a rule is judged."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mlbench.config.base import suggest
from mlbench.metrics import catalog, info, known_names

# What is compared, which metrics a rule may name, and which move in percentage points (fractions)
# all come from the metrics catalog (mlbench.metrics).
STATUS_VALUES = ("failed", "skipped", "gone")
CORE_DEFAULT_RULES = ("latency.median:+10%", "status:failed")


def default_rules() -> list[str]:
    """mlbench's default gate, plus the rules each registered backend adds (a placement share that
    must not fall, for example)."""
    from mlbench.plugins.registry import default_rules as backend_rules

    return [CORE_DEFAULT_RULES[0], *backend_rules(), *CORE_DEFAULT_RULES[1:]]


_THRESHOLD = re.compile(r"^(?P<op>[+-]|[<>])(?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(?P<unit>%|pp)?$")


class RuleError(ValueError):
    """A rule that cannot be parsed; the message is one line and names the rule."""


class Rule(BaseModel):
    """One parsed gate rule."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str
    metric: str
    kind: Literal["relative", "points", "absolute_change", "above", "below", "status"]
    direction: Literal[1, -1] = Field(default=1, description="+1: a rise is bad; -1: a fall is bad.")
    threshold: float = 0.0
    status: str | None = None

    def describe(self) -> str:
        word = "rises" if self.direction > 0 else "falls"
        if self.kind == "relative":
            return f"{self.metric} {word} by more than {self.threshold:g}%"
        if self.kind == "points":
            return f"{self.metric} {word} by more than {self.threshold:g} percentage points"
        if self.kind == "absolute_change":
            return f"{self.metric} {word} by more than {self.threshold:g}"
        if self.kind == "above":
            return f"{self.metric} is above {self.threshold:g}"
        if self.kind == "below":
            return f"{self.metric} is below {self.threshold:g}"
        return f"a variant becomes {self.status}"


def parse_rule(text: str) -> Rule:
    """`latency.median:+10%` → Rule; anything else raises RuleError with a one-line reason."""
    if not isinstance(text, str):
        raise RuleError(f"a rule is text like 'latency.median:+10%', got {text!r}")
    raw = text.strip()
    metric, sep, threshold = raw.partition(":")
    metric, threshold = metric.strip(), threshold.strip()
    if not sep or not metric or not threshold:
        raise RuleError(f"rule '{raw}' is not METRIC:THRESHOLD (e.g. latency.median:+10%, "
                        "placement.neural_engine:-5pp, verify.max_rel:>1e-2, status:failed)")
    if metric == "status":
        if threshold not in STATUS_VALUES:
            raise RuleError(f"rule '{raw}': status can be {', '.join(STATUS_VALUES)}, "
                            f"not '{threshold}'{suggest(threshold, list(STATUS_VALUES))}")
        return Rule(text=raw, metric="status", kind="status", status=threshold)
    known = info(metric)
    if known is None:
        names = known_names()
        raise RuleError(f"rule '{raw}': unknown metric '{metric}'{suggest(metric, [*names, 'status'])} "
                        f"(known: {', '.join(names)})")
    match = _THRESHOLD.match(threshold)
    if not match:
        raise RuleError(f"rule '{raw}': threshold '{threshold}' is not +N%, -N%, +Npp, -Npp, +N, -N, >N or <N")
    op, number, unit = match["op"], float(match["num"]), match["unit"]
    if op in "<>":
        if unit:
            raise RuleError(f"rule '{raw}': a limit ({op}N) is a plain number in the metric's unit, without {unit}")
        return Rule(text=raw, metric=metric, kind="above" if op == ">" else "below",
                    direction=1 if op == ">" else -1, threshold=number)
    direction = 1 if op == "+" else -1
    if unit == "pp" and not known.is_fraction:
        fractions = ", ".join(m.name for m in catalog().values() if m.is_fraction)
        raise RuleError(f"rule '{raw}': percentage points apply to fractions ({fractions}); use % for {metric}")
    if unit == "pp" and number > 100:
        raise RuleError(f"rule '{raw}': a fraction cannot move by more than 100 percentage points")
    kind = {"%": "relative", "pp": "points", None: "absolute_change"}[unit]
    return Rule(text=raw, metric=metric, kind=kind, direction=direction, threshold=number)


def parse_rules(texts: list[str]) -> list[Rule]:
    return [parse_rule(t) for t in texts]
