"""Sustained runs: a variant called continuously for `latency.sustained_s`, its first and last windows compared.

A benchmark of thirty calls sees a cool machine; an app that runs a model for minutes sees a hot one. The
sustained run calls the loaded artifact back to back for the configured time (after the usual timed loop, so
that loop's figures stay as they were) and reports the median of the first window and of the last
(`latency.sustained.first`, `latency.sustained.last`: a minute each, or a third of the run when it is shorter)
and the slope of the window medians over the run (`latency.sustained.slope`, ms per minute, least squares).

Why a run slowed is said beside it, never guessed: `throttled` when the thermal state rose between the
readings either side (`mlbench.thermal`), and the other processes' share of the CPU in the first and last
windows (`mlbench.machine_load`), since on a shared machine load slows a run as heat does.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from mlbench import thermal
from mlbench.machine_load import LoadSample, load_between, sample
from mlbench.records import Metric


class SustainedSettings(Protocol):
    """What a sustained run reads of the pipeline's `latency:` settings (config's LatencySettings)."""

    @property
    def sustained_s(self) -> float: ...

    @property
    def sustained_window_s(self) -> float: ...

SLOWED = 0.10
"""The last window's median this much above the first's is a slowdown worth a note."""
LOAD_ROSE = 0.10
"""Other processes' CPU share this much higher in the last window than in the first: the note says the load rose."""
MIN_WINDOWS = 3


@dataclass
class SustainedRun:
    """The calls of one sustained run: when each started (seconds from the start) and how long it took."""

    seconds: float
    window_s: float
    at_s: list[float]
    samples_ms: list[float]
    thermal_before: dict[str, Any]
    thermal_after: dict[str, Any]
    load_first: dict[str, Any] | None = None
    load_last: dict[str, Any] | None = None
    windows: list[float] = field(default_factory=list)  # median of each consecutive window

    def window(self, start: float, end: float) -> list[float]:
        return [ms for at, ms in zip(self.at_s, self.samples_ms) if start <= at < end]

    @property
    def first(self) -> float:
        return statistics.median(self.window(0.0, self.window_s) or self.samples_ms[:1])

    @property
    def last(self) -> float:
        return statistics.median(self.window(self.seconds - self.window_s, float("inf")) or self.samples_ms[-1:])

    @property
    def slope(self) -> float:
        """ms per minute: the least-squares line through the window medians against their midpoints."""
        points = [((i + 0.5) * self.window_s / 60, m) for i, m in enumerate(self.windows)]
        if len(points) < 2:
            return 0.0
        mean_x = statistics.fmean(x for x, _ in points)
        mean_y = statistics.fmean(y for _, y in points)
        spread = sum((x - mean_x) ** 2 for x, _ in points)
        return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0

    def throttled(self) -> str | None:
        return thermal.rose(self.thermal_before, self.thermal_after)

    def note(self) -> str | None:
        """Why the last window is slower than the first, in words; None when it is not (by SLOWED)."""
        hot = self.throttled()
        if hot is not None:
            return f"throttled: {hot}"
        change = self.last / self.first - 1 if self.first > 0 else 0.0
        if change < SLOWED:
            return None
        said = [f"slowed {change:.0%} from the first window to the last"]
        first = (self.load_first or {}).get("other_share")
        last = (self.load_last or {}).get("other_share")
        if first is not None and last is not None:
            said.append(f"other processes used {first:.0%} of the CPUs in the first window and {last:.0%} in the last"
                        + (" (the machine's load rose)" if last - first >= LOAD_ROSE else ""))
        if not thermal.readable(self.thermal_after):
            said.append(f"thermal state unread ({self.thermal_after.get('reason') or 'nothing readable'})")
        else:
            said.append("the thermal state did not rise")
        return "; ".join(said)

    def metrics(self) -> dict[str, Metric]:
        return {"latency.sustained.first": Metric.measured(self.first, "ms"),
                "latency.sustained.last": Metric.measured(self.last, "ms"),
                "latency.sustained.slope": Metric.measured(self.slope, "ms/min")}

    def details(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 3), "window_s": round(self.window_s, 3), "calls": len(self.samples_ms),
                "first_ms": self.first, "last_ms": self.last, "slope_ms_per_min": self.slope,
                "window_medians_ms": self.windows, "throttled": self.throttled() is not None, "note": self.note(),
                "thermal_before": self.thermal_before, "thermal_after": self.thermal_after,
                "load_first_window": self.load_first, "load_last_window": self.load_last}


def window_for(seconds: float, window_s: float) -> float:
    """The configured window, or a third of the run when that is shorter (so first and last never overlap)."""
    return min(window_s, seconds / MIN_WINDOWS)


def run_sustained(call: Callable[[], Any], seconds: float, window_s: float, *,
                  reader: Callable[[], dict[str, Any]] | None = None) -> SustainedRun:
    """Call `call` back to back for `seconds`; the machine's load is read at the edges of the first and last
    windows, between calls, and the thermal state either side of the run."""
    window = window_for(seconds, window_s)
    last_start = seconds - window
    reader = reader or thermal.read
    before = reader()
    clock = time.perf_counter
    at: list[float] = []
    took: list[float] = []
    marks: dict[str, LoadSample] = {"start": sample()}
    start = clock()
    elapsed = 0.0
    while elapsed < seconds:
        if "first_end" not in marks and elapsed >= window:
            marks["first_end"] = sample()
        if "last_start" not in marks and elapsed >= last_start:
            marks["last_start"] = sample()
        t0 = clock()
        call()
        t1 = clock()
        at.append(t0 - start)
        took.append((t1 - t0) * 1e3)
        elapsed = t1 - start
    marks["end"] = sample()
    run = SustainedRun(seconds=seconds, window_s=window, at_s=at, samples_ms=took, thermal_before=before,
                       thermal_after=reader())
    if "first_end" in marks:
        run.load_first = load_between(marks["start"], marks["first_end"], "first sustained window")
    if "last_start" in marks:
        run.load_last = load_between(marks["last_start"], marks["end"], "last sustained window")
    count = max(int(seconds // window), 1)
    run.windows = [statistics.median(w) for i in range(count)
                   if (w := run.window(i * window, (i + 1) * window if i < count - 1 else float("inf")))]
    return run


def sustained_figures(call: Callable[[], Any], settings: SustainedSettings, metrics: dict[str, Metric],
                      details: dict[str, Any]) -> None:
    """The sustained run a backend makes after its timed loop when `latency.sustained_s` is set: its figures into
    `metrics`, its facts into `details["sustained"]`. Nothing when it is 0 (the default)."""
    if not settings.sustained_s:
        return
    run = run_sustained(call, settings.sustained_s, settings.sustained_window_s)
    metrics.update(run.metrics())
    details["sustained"] = run.details()
