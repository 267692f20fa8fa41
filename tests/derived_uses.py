"""What a record says of its derived figures (`mlbench.store.derived`): the outcomes of one kind of work, in
order — shared by the tests of the backends that cache derived figures."""

from __future__ import annotations

from mlbench.store.derived import DERIVED_DETAILS


def derived_uses(record, kind: str) -> list[str]:
    """The outcomes ("computed", "cached", ...) of `record`'s uses of derived entries of `kind`."""
    return [use["outcome"] for use in record.details[DERIVED_DETAILS] if use["kind"] == kind]


def run_all_ok(path):
    """One run of the pipeline at `path` (one job), every record ok: the report."""
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline

    report = run(load_pipeline(path), jobs=1)
    assert [r.status for r in report.records] == ["ok"] * len(report.records), [r.error for r in report.records]
    return report


def figures(report, *details: str) -> dict:
    """Each variant's verification, metrics (value, source), placement and the named details: what a warm rerun
    must report as the cold run did."""
    return {r.variant_id: (r.verify.model_dump(), {n: (m.value, m.source) for n, m in r.metrics.items()},
                           r.placement.model_dump(), *(r.details[d] for d in details)) for r in report.records}
