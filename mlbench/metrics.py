"""The metrics catalog: every figure a record can carry, with its unit, which way is better, whether
`mlbench compare` checks it by default, and how reports format it.

Records, compare, the Markdown and HTML reports and history all read this one table instead of
keeping their own lists. Per-device placement shares come from the backend registry's devices, two
per device: `placement.<device>`, the share of the cost (what reports show and compare checks), and
`placement.count.<device>`, the share of compute operations (a rule may name it); and
families of metrics named by the pipeline (a prefix plus an id, e.g. an estimate per target chip)
from the backends' specs: `info(name)` knows those too.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

from mlbench.plugins.spec import MetricFamily
from mlbench.records import COUNT_SHARE

Better = Literal["lower", "higher"]


@dataclass(frozen=True)
class ColumnPlace:
    """Where a metric stands in a model's report tables: the renderers read this, so a metric gets a column
    by one catalog line and no renderer names it."""

    order: float = 5.0
    """Left to right; the columns that are no metric (variant, status, vs eager, verify, placement, size,
    export, note) stand at `report.markdown.run_report.FIXED_ORDER`, metrics between them."""
    keep: float | None = None
    """How long a pull-request comment keeps it when columns must fold (lower: longer); None: an extra
    column's rule (the first one kept beside the median, the others folded first)."""
    always: bool = False
    """Shown for every model ('–' where no record carries it); otherwise only where a record does."""
    title: str | None = None
    """The Markdown heading where it differs from the metric's label."""
    formats: tuple[str, ...] = ("markdown", "html")
    """Which tables show it: `markdown` (a model's table, also drawn in the HTML) and `html` (the HTML's
    headline table)."""


EXTRA = ColumnPlace(formats=("markdown",))
"""A column only where a model's records carry the metric, in the Markdown table."""


@dataclass(frozen=True)
class MetricInfo:
    name: str
    unit: str
    """ms, ms/min, s, bytes, ratio (a share in [0, 1], moved in percentage points), count, rel, abs."""
    label: str
    better: Better | None = None
    """None where neither direction is good in itself (e.g. a share of CPU work)."""
    compared: bool = False
    """Shown by `mlbench compare` without a rule asking for it."""
    sampled: bool = False
    """Backed by raw latency samples, so compare's noise guard applies."""
    column: ColumnPlace | None = None
    """Its column in the reports' tables, if it has one (`ColumnPlace`)."""
    describe: str = ""
    """One line on what it is, for the notes under a report's table (a family's metrics)."""
    noise_floor: tuple[float, float] | None = None
    """(relative, absolute in the unit): a change within the larger of the two (relative × base) is noise (an
    allocator's), never counted by a compare rule."""

    @property
    def is_fraction(self) -> bool:
        return self.unit == "ratio"

    def format(self, value: float | None, *, with_unit: bool = True) -> str:
        return format_value(value, self.unit, with_unit=with_unit)


_CORE: tuple[MetricInfo, ...] = (
    MetricInfo("latency.median", "ms", "median ms", "lower", compared=True, sampled=True,
               column=ColumnPlace(order=2, keep=2, always=True, title="Median ms")),
    MetricInfo("latency.best", "ms", "best ms", "lower", compared=True, sampled=True,
               column=ColumnPlace(order=3, keep=9, always=True, title="Best ms")),
    MetricInfo("load_time", "ms", "load ms", "lower", compared=True,
               column=ColumnPlace(order=4.5, always=True, formats=("html",))),
    # placement.<device> (by cost) and placement.count.<device> shares are inserted here, in the registry's device order
    MetricInfo("placement.switches", "count", "switches", "lower", compared=True),
    MetricInfo("verify.max_rel", "rel", "verify max_rel", "lower", compared=True),
    MetricInfo("verify.max_abs", "abs", "verify max_abs", "lower", compared=True),
    MetricInfo("verify.snr_db", "dB", "SNR dB", "higher"),
    MetricInfo("verify.top1_agreement", "ratio", "top-1 agreement", "higher"),
    MetricInfo("verify.emulated.max_rel", "rel", "emulated max_rel", "lower"),
    MetricInfo("verify.emulated.max_abs", "abs", "emulated max_abs", "lower"),
    MetricInfo("size.package", "bytes", "package", "lower", compared=True),
    MetricInfo("latency.p90", "ms", "p90 ms", "lower", sampled=True,
               column=ColumnPlace(order=4, keep=8, always=True)),
    MetricInfo("first_call", "ms", "first call ms", "lower"),
    MetricInfo("compile_time", "ms", "compile ms", "lower"),
    # cold and warm loads (mlbench/cold_start.py): the first after clearing what can be cleared, then a second
    MetricInfo("load_time.cold", "ms", "cold load ms", "lower", column=EXTRA,
               describe="the first load, after clearing the caches this OS lets mlbench clear (the record's "
               "load_caches says which)"),
    MetricInfo("load_time.warm", "ms", "warm load ms", "lower", column=EXTRA,
               describe="a second load of the same artifact, its caches warm"),
    # sustained runs (mlbench/sustained.py, latency.sustained_s)
    MetricInfo("latency.sustained.first", "ms", "sustained first ms", "lower",
               describe="median of the first window of a sustained run"),
    MetricInfo("latency.sustained.last", "ms", "sustained last ms", "lower", compared=True, column=EXTRA,
               describe="median of the last window of a sustained run (latency.sustained_s): what a long session "
               "sees; its note says why it slowed"),
    MetricInfo("latency.sustained.slope", "ms/min", "sustained slope ms/min", "lower", column=EXTRA,
               describe="least-squares slope of a sustained run's window medians, in ms per minute"),
    MetricInfo("size.weights", "bytes", "weights", "lower"),
    MetricInfo("params", "count", "params"),
    MetricInfo("macs", "count", "MACs"),
    # a generative model's (mlbench.generate): prefill over the prompt, then one decode step per token
    MetricInfo("latency.prefill", "ms", "prefill ms", "lower", compared=True, sampled=True),
    MetricInfo("latency.decode", "ms", "decode ms/token", "lower", compared=True, sampled=True),
    MetricInfo("tokens_per_s.decode", "tokens/s", "decode tokens/s", "higher", compared=True, sampled=True),
    MetricInfo("memory.kv_cache", "bytes", "KV cache", "lower", compared=True),
    MetricInfo("verify.token_agreement", "ratio", "token agreement", "higher", compared=True),
    MetricInfo("verify.logits_max_rel", "rel", "logits max_rel", "lower", compared=True),
    # memory (mlbench/memory.py measures; Core ML's estimate: backends/coreml/memory_estimate.py)
    MetricInfo("memory.peak", "bytes", "peak memory", "lower", compared=True, column=EXTRA,
               describe="resident memory at the predictions' peak, above the level before loading",
               noise_floor=(0.05, 4e6)),
    MetricInfo("memory.load", "bytes", "load memory", "lower", noise_floor=(0.05, 4e6),
               describe="resident memory the artifact's load added (eager PyTorch: its parameters' and buffers' "
               "bytes, the module being built by its model source before the measurement)"),
    MetricInfo("memory.estimated", "bytes", "estimated memory", "lower", column=EXTRA,
               describe="weights as stored + the largest sum of live activations in program order, at the variant's "
               "precision and shape (no buffer reuse beyond liveness; the runtime's own workspace left out)"),
)


@functools.cache
def catalog() -> dict[str, MetricInfo]:
    """Every known metric by name, in display order."""
    from mlbench.plugins.registry import devices

    known = devices().values()
    placement = [
        *(MetricInfo(f"placement.{d.name}", "ratio", f"{d.short} share of cost", compared=True) for d in known),
        *(MetricInfo(f"{COUNT_PREFIX}{d.name}", "ratio", f"{d.short} share of ops") for d in known),
    ]
    ordered = [*_CORE[:3], *placement, *_CORE[3:]]
    return {m.name: m for m in ordered}


FAMILY_ID = re.compile(r"^[a-z0-9][a-z0-9_]*$")

GENERATIVE_ESTIMATES = (
    MetricFamily(prefix="latency.estimated.prefill.", placeholder="chip", unit="ms", label="≈prefill ms {name}",
                 better="lower", describe="prefill over the prompt estimated for that chip (compute-bound), never "
                 "measured"),
    MetricFamily(prefix="latency.estimated.decode.", placeholder="chip", unit="ms", label="≈decode ms/token {name}",
                 better="lower", describe="one decode step estimated for that chip (weights and cache bytes over "
                 "its bandwidth), never measured"),
)
"""A generative model's estimates per chip (mlbench.generate), checked before the backends' families: their
prefixes are longer than a backend's `latency.estimated.`."""


def info(name: str) -> MetricInfo | None:
    """The catalog's entry for a metric, including one of a backend's families (`prefix` + an id)."""
    known = catalog().get(name)
    if known is not None:
        return known
    from mlbench.plugins.registry import metric_families

    for family in (*GENERATIVE_ESTIMATES, *metric_families()):
        suffix = name[len(family.prefix):] if name.startswith(family.prefix) else None
        if suffix is not None and FAMILY_ID.match(suffix):
            return MetricInfo(name, family.unit, family.label.format(name=suffix), family.better,
                              column=EXTRA if family.column else None, describe=family.describe)
    return None


def known_names() -> list[str]:
    """Every metric name a rule may use, families as `prefix<id>` patterns (for "did you mean")."""
    from mlbench.plugins.registry import metric_families

    return [*catalog(), *(f"{f.prefix}<{f.placeholder}>" for f in (*GENERATIVE_ESTIMATES, *metric_families()))]


def columns(names: list[str]) -> list[MetricInfo]:
    """Of the metric names records carry (in order), those that get a column only where they are carried
    (`ColumnPlace.always` off): a backend's families, memory."""
    found = [info(name) for name in dict.fromkeys(names)]
    return [m for m in found if m is not None and m.column is not None and not m.column.always]


def table_columns(names: list[str], table: str) -> list[MetricInfo]:
    """The metric columns of one kind of table (`markdown` or `html`), left to right: the catalog's
    `always` columns and those the records carry (`names`), ordered by `ColumnPlace.order`."""
    always = [m for m in catalog().values() if m.column is not None and m.column.always]
    chosen = [m for m in (*always, *columns(names)) if m.column is not None and table in m.column.formats]
    return sorted(chosen, key=lambda m: m.column.order if m.column is not None else 0.0)


def compared_by_default() -> list[str]:
    return [m.name for m in catalog().values() if m.compared]


COUNT_PREFIX = COUNT_SHARE


def placement_shares(*, by: Literal["cost", "count"] = "cost") -> list[str]:
    """`placement.<device>` names (shares of the cost), or with `by="count"` `placement.count.<device>`
    (shares of compute operations), accelerators first."""
    return [m.name for m in catalog().values() if m.name.startswith("placement.") and m.is_fraction
            and m.name.startswith(COUNT_PREFIX) == (by == "count")]


def headline() -> list[str]:
    """The figures a one-line summary of a variant shows: its median, where the registry's first
    device (the preferred accelerator) stands, and its output error."""
    shares = placement_shares()
    return ["latency.median", *shares[:1], "verify.max_rel"]


ESTIMATE_MARK = "≈"
"""Marks an estimated figure in every text report. Not `~`: GitHub renders `~a~` (two estimates in
one table cell or line) as strikethrough."""


SOURCE_MARKS = {"measured": "", "emulated": "†", "reference": "‡", "estimated": ESTIMATE_MARK}
"""How a figure shows where it came from in text; each report's legend explains the marks."""


def estimate_mark(source: str | None) -> str:
    """The mark an estimated figure carries in text; measured, emulated and reference figures carry none of it."""
    return ESTIMATE_MARK if source == "estimated" else ""


def source_mark(source: str | None) -> str:
    """`≈` for an estimate, `†` for an emulated figure, `‡` for a reference runtime's, nothing for a measurement."""
    return SOURCE_MARKS.get(source or "", "")


def format_ms(value: float | None) -> str:
    """Milliseconds with the digits that matter at that size; – when absent."""
    if value is None:
        return "–"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def format_value(value: float | None, unit: str, *, with_unit: bool = True) -> str:
    """A figure in its unit, for text reports and compare output; – when absent."""
    if value is None:
        return "–"
    if unit == "ratio":
        return f"{value * 100:.1f}%"
    if unit == "ms":
        text = f"{value:.3f}" if value < 1 else f"{value:.2f}"
        return f"{text} ms" if with_unit else text
    if unit == "ms/min":
        return f"{value:+.3g} ms/min" if with_unit else f"{value:+.3g}"
    if unit == "s":
        return f"{value:.3f} s" if with_unit else f"{value:.3f}"
    if unit == "tokens/s":
        return f"{value:.4g} tok/s" if with_unit else f"{value:.4g}"
    if unit == "bytes":
        from mlbench.units import human_bytes

        return human_bytes(int(value))
    return f"{value:.3g}" if isinstance(value, float) and not float(value).is_integer() else f"{value:g}"
