""""Which variant should I ship?" as data: per model and per deployment target (where a variant runs: Apple
devices, Android, a server's CPU, as each backend's spec says), the variants side by side on latency, size and
output error, and the ones no other variant of the same target beats on all three (the candidates, starred).

A star never crosses targets: an iPhone's estimate is never ranked against an x86 measurement. Within a target
every row is compared by one figure: the one most of its variants have (the measured median, else one chip's
estimate). The HTML draws it (`html/ship.py`); the Markdown report's summary table lists the candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from mlbench.metrics import ESTIMATE_MARK, columns
from mlbench.plugins.spec import SERVER_CPU, Deployment
from mlbench.records import RunRecord


class Row(NamedTuple):
    record: RunRecord
    latency: float | None
    latency_source: str | None
    size: int | None
    error: float | None
    error_source: str | None
    tolerance: float | None
    passed: bool


@dataclass(frozen=True)
class Group:
    """One model's variants that ship to one place, fastest first, with the basis of their latency figure."""

    deployment: Deployment
    rows: list[Row]
    basis: str
    """The latency figure the rows share, in words (`median`, `≈ estimate on a17pro`, `no latency`)."""
    basis_metric: str | None
    stars: set[str]
    """Variant ids no other row of the group dominates."""

    @property
    def wanted(self) -> bool:
        """Whether a chart of the group says anything: two variants or more with a latency and a size or an error."""
        return sum(r.latency is not None and (r.size is not None or r.error is not None) for r in self.rows) >= 2


def deployment_of(record: RunRecord) -> Deployment:
    """Where the variant ships, as its backend's spec says; a backend the registry does not know ships to a CPU
    like this machine's."""
    from mlbench.plugins.registry import specs

    spec = specs().get(record.backend)
    return spec.deployment_of(dict(record.axes)) if spec is not None else SERVER_CPU


def _value(record: RunRecord, name: str) -> float | None:
    metric = record.metrics.get(name)
    return metric.value if metric is not None else None


def latency_basis(records: Sequence[RunRecord]) -> tuple[str, str] | None:
    """(metric name, words) of the latency figure most ok variants have: the median first, then each estimate."""
    ok = [r for r in records if r.status == "ok"]
    estimates = [c for c in columns([n for r in ok for n in r.metrics]) if c.unit == "ms"]
    options = [("latency.median", "median")] + [(c.name, f"{ESTIMATE_MARK} estimate on {c.name.rsplit('.', 1)[-1]}")
                                                for c in estimates]
    counts = [(sum(_value(r, name) is not None for r in ok), -i, name, words)
              for i, (name, words) in enumerate(options)]
    best = max(counts, default=None)
    return (best[2], best[3]) if best is not None and best[0] > 0 else None


def rows_of(records: Sequence[RunRecord]) -> tuple[list[Row], str]:
    """The rows (ok variants with any figure), fastest first, and the latency basis in words."""
    basis = latency_basis(records)
    rows = []
    for record in records:
        if record.status != "ok":
            continue
        latency = record.metrics.get(basis[0]) if basis else None
        has_latency = latency is not None and latency.value is not None
        verify = record.verify
        error = verify.max_rel if verify is not None and verify.max_rel is not None else None
        row = Row(record, latency.value if has_latency and latency else None,
                  latency.source if has_latency and latency else None,
                  record.artifact.size_bytes if record.artifact else None, error,
                  verify.source if verify else None, verify.tolerance if verify else None,
                  verify.passed if verify else True)
        if row.latency is not None or row.size is not None or row.error is not None:
            rows.append(row)
    rows.sort(key=lambda r: (r.latency is None, r.latency or 0.0))
    return rows, basis[1] if basis else "no latency"


def front(rows: Sequence[Row]) -> set[str]:
    """Variant ids no other row dominates (at least as good on latency, size and error, better on one)."""
    full = [r for r in rows if r.latency is not None and r.size is not None and r.error is not None and r.passed]
    keys = {r.record.variant_id: (r.latency, r.size, r.error) for r in full}

    def beats(a: tuple, b: tuple) -> bool:
        return all(x <= y for x, y in zip(a, b)) and a != b

    return {v for v, k in keys.items() if not any(beats(other, k) for o, other in keys.items() if o != v)}


def ship_groups(records: Sequence[RunRecord]) -> list[Group]:
    """One model's variants by deployment target (in the targets' display order), each with its own stars."""
    by_target: dict[str, list[RunRecord]] = {}
    targets: dict[str, Deployment] = {}
    for record in records:
        target = deployment_of(record)
        targets.setdefault(target.name, target)
        by_target.setdefault(target.name, []).append(record)
    groups = []
    for name in sorted(by_target, key=lambda n: targets[n].rank):
        rows, words = rows_of(by_target[name])
        basis = latency_basis(by_target[name])
        groups.append(Group(targets[name], rows, words, basis[0] if basis else None, front(rows)))
    return groups
