"""Two report.json files of the same pipeline, compared apart from what differs run to run: timings, run ids,
dates, the machine's load and measured memory. For a refactor that must not change behaviour: run a pipeline
before and after, then

    python benchmarks/same_reports.py before/report.json after/report.json

prints every other difference (a path and both values) and exits 1 if there is one."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

RUN_TO_RUN = {"run_id", "created", "finished", "started", "seconds", "stage_seconds", "load", "load_average",
              "export_seconds", "total_s", "samples", "cache_hit", "mlbench_version", "op_time", "time_ms",
              "seconds_per_call", "after_load_bytes", "baseline_bytes"}
"""Keys whose values are the run's own: when it ran, for how long, how busy the machine was, what the process
held around the measurement."""
RANDOM_NAMES = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|/tmp/tmp\w+")
"""Names an exporter makes up each time (a model identifier, a temporary folder)."""
TIMED_UNITS = {"ms", "s", "tokens/s"}


def _timed(value: Any) -> bool:
    """A measured figure of time: its value is the run's own."""
    return isinstance(value, dict) and value.get("source") == "measured" and value.get("unit") in TIMED_UNITS


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for key in sorted(set(a) | set(b)):
            if key in RUN_TO_RUN:
                continue
            here = f"{path}.{key}" if path else key
            if key.startswith("memory.") and isinstance(a.get(key), dict) and a[key].get("source") in ("measured", "reference"):
                continue  # memory a runtime measured moves with the allocator from run to run
            if key == "latency" or (_timed(a.get(key)) and _timed(b.get(key))):
                continue  # the timing record and measured times are the run's own
            if key not in a or key not in b:
                found.append(f"{here}: only in {'after' if key in b else 'before'}")
                continue
            found += differences(a[key], b[key], here)
        return found
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items before, {len(b)} after"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    if isinstance(a, str) and isinstance(b, str):
        if path.endswith(".path"):  # the cache folder is the run's; the entry's key and file name are not
            a, b = "/".join(a.split("/")[-3:]), "/".join(b.split("/")[-3:])
        a, b = RANDOM_NAMES.sub("…", a), RANDOM_NAMES.sub("…", b)
    return [] if a == b else [f"{path}: {a!r} before, {b!r} after"]


def main(argv: list[str]) -> int:
    before, after = (json.loads(Path(p).read_text(encoding="utf-8")) for p in argv[:2])
    for report in (before, after):
        report["records"] = sorted(report["records"], key=lambda r: r["variant_id"])
    found = differences(before, after)
    print("\n".join(found) if found else f"same apart from timings, ids and dates: {len(before['records'])} records")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
