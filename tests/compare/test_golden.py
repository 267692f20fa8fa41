"""One comparison of two hand-built runs, pinned whole: every rule kind, every delta case (missing on one
side, absent with a reason, sources that differ, no raw samples), every group and warning.

tests/golden/comparison.json is the expected `Comparison` as JSON. It was written by this code and then read
line by line; when a change to compare alters it, read the difference before you replace the file: each
line is a figure or a sentence a user sees (`mlbench compare --format json`).
"""

from __future__ import annotations

import json

from mlbench.compare.comparison import compare, parse_rules
from mlbench.records import Metric
from tests.compare.test_comparison import rec, run_of
from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "golden" / "comparison.json"
TIGHT = [10.0 + 0.01 * i for i in range(21)]
RULES = ["latency.median:+10%", "placement.neural_engine:-5pp", "placement.switches:+2", "verify.max_rel:>1e-2",
         "load_time:+25%", "status:failed", "status:gone"]


def runs():
    def est(value: float, unit: str = "ratio") -> Metric:
        return Metric.estimated(value, unit)

    meas = Metric.measured
    base = run_of([
        rec("slow/coreml/all", TIGHT, placement__neural_engine=est(0.95), placement__switches=est(1, "count"),
            verify__max_rel=meas(1e-3, "rel"), load_time=meas(100.0, "ms")),
        rec("fast/torch/cpu", TIGHT, verify__max_rel=meas(0.5, "rel")),
        rec("nosamples/torch/cpu", TIGHT),
        rec("absent/coreml/all"),
        rec("broke/torch/cpu", TIGHT),
        rec("gone/torch/cpu"),
    ], "base0001")
    head = run_of([
        rec("slow/coreml/all", [x * 1.2 for x in TIGHT], placement__neural_engine=est(0.80),
            placement__switches=est(4, "count"), verify__max_rel=meas(5e-2, "rel"), load_time=est(90.0, "ms")),
        rec("fast/torch/cpu", [x * 0.5 for x in TIGHT], verify__max_rel=meas(1e-3, "rel")),
        rec("nosamples/torch/cpu", latency__median=meas(15.1, "ms")),
        rec("absent/coreml/all", latency__median=Metric.absent("ms", "Core ML runs only on macOS; this machine runs Linux")),
        rec("broke/torch/cpu", status="failed"),
        rec("new/torch/cpu", verify__max_rel=meas(2e-2, "rel")),
    ], "head0001")
    head.machine["cpu"] = "Apple M3"
    head.pipeline.sha256 = "1" * 64
    head.finished = None
    return base, head



def test_a_comparison_of_every_kind_of_change_matches_the_golden_file():
    base, head = runs()
    result = compare(base, head, parse_rules(RULES), base_label="main.json", head_label="last", base_commit="abc123",
                     head_commit="def456")
    findings = {v.variant_id: [(f.rule, f.kind, f.message) for f in v.findings] for v in result.variants}
    assert findings == {
        "slow/coreml/all": [("latency.median:+10%", "regression", "10.10 ms → 12.12 ms (+20.0%)"),
                            ("placement.neural_engine:-5pp", "regression", "≈95.0% → ≈80.0% (-15.0 pp)"),
                            ("placement.switches:+2", "regression", "≈1 → ≈4 (×4)"),
                            ("verify.max_rel:>1e-2", "regression", "0.001 → 0.05 (×50)")],
        "fast/torch/cpu": [("latency.median:+10%", "improvement", "10.10 ms → 5.05 ms (-50.0%)"),
                           ("verify.max_rel:>1e-2", "improvement", "0.5 → 0.001 (×0.002)")],
        "nosamples/torch/cpu": [("latency.median:+10%", "regression", "10.10 ms → 15.10 ms (+49.5%)")],
        "absent/coreml/all": [],
        "broke/torch/cpu": [("status:failed", "regression", "ok → failed: measure: boom")],
        "new/torch/cpu": [("verify.max_rel:>1e-2", "regression", "– → 0.02 (not comparable); base: not reported")],
        "gone/torch/cpu": [("status:gone", "regression", "ok → gone")],
    }
    assert result.model_dump(mode="json") == json.loads(GOLDEN.read_text(encoding="utf-8"))
