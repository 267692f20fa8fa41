"""Progress of a run: a live display on a terminal; in CI or a pipe, plain lines a log keeps.

The runner calls these hooks and prints nothing itself; `quiet` silences the lines (errors still
reach stderr through the CLI). In plain mode a CI log shows, besides a line per record, when each
long stage (loading a model, exporting an artifact, measuring a variant) starts and ends, and a
heartbeat naming what runs whenever nothing was printed for `HEARTBEAT_S`: a Core ML sweep's first
minutes of exports are never a silent log a CI runner may take for a hung job. `verbose` adds the
short stages (queued, exported).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from mlbench.records import RunRecord
from mlbench.report.text import printable
from mlbench.stability import metric_notes, suffix

if TYPE_CHECKING:
    from rich.progress import TaskID

HEARTBEAT_S = 20.0
"""After this many seconds without a line, a plain log says what is running (docs/running.md promises a line
at least every 30 s)."""
ANNOUNCE_S = 1.0
"""A stage still running after this long gets its start (and later its end) in a plain log."""
LONG_STAGES = ("load", "export", "measure")
"""The stages a plain log shows the start of (and, but for measure, whose record is its end, the end)."""


def record_line(record: RunRecord, done: int, total: int) -> str:
    """`[2/8] m/coreml/float16/all  ok  ≈0.412 ms on a17pro (estimated, ×2.01 at worst), memory ≈10.0 MB
    (estimated)`: the best figure the variant has leads (measured, else the first chip's estimate with its band);
    where both exist, the estimate stays beside the measurement."""
    median = record.metrics.get("latency.median")
    figure = f"median {median.value:.3f} ms ({median.source})" if median and median.value is not None else ""
    if figure and median is not None:
        figure += suffix(median.stability)
    estimate = _estimate(record)
    figure = "; ".join(f for f in (figure, estimate) if f)
    if figure:
        figure += _memory(record)
    unstable = metric_notes(record.metrics)
    if unstable and record.status == "ok":  # a figure not to trust says so where it is first seen
        figure = f"{figure}  [{'; '.join(unstable)}]".strip()
    detail = record.error if record.status != "ok" else figure
    line = f"[{done:>{len(str(total))}}/{total}] {record.variant_id}  {record.status}  {detail or ''}".rstrip()
    return printable(line)  # a model's error text never drives the terminal


def _estimate(record: RunRecord) -> str:
    """`≈0.412 ms on a17pro (estimated, ×2.01 at worst)`: the first chip's latency estimate (the pipeline's first
    `estimate_on`), with its band where the calibration gives one; '' without one."""
    from mlbench.metrics import ESTIMATE_MARK
    from mlbench.report.lead import ESTIMATED_LATENCY, chips_of

    chip = next(iter(chips_of([record])), None)
    metric = record.metrics.get(ESTIMATED_LATENCY + chip) if chip is not None else None
    if metric is None or metric.value is None:
        return ""
    band = f", ×{metric.band.worst_ratio:.2f} at worst" if metric.band is not None else ""
    return f"{ESTIMATE_MARK}{metric.value:.3f} {metric.unit} on {chip} (estimated{band})"


def _memory(record: RunRecord) -> str:
    """`, memory 40.0 MB (measured)`: the measured peak, else the estimate; '' without either."""
    from mlbench.metrics import source_mark
    from mlbench.report.lead import lead_memory
    from mlbench.units import human_bytes

    memory = lead_memory(record)
    if memory is None or memory.value is None:
        return ""
    return f", memory {source_mark(memory.source)}{human_bytes(int(memory.value))} ({memory.source})"


def clock(seconds: float) -> str:
    """`2.3 s`, `45 s`, `2 min 05 s`: a duration as a log line gives it."""
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60:02d} s"


class Progress:
    """Silent base: the Python API's default."""

    def start(self, total: int, done: int = 0) -> None: ...

    def note(self, text: str) -> None:
        """A line about the run as a whole (e.g. what a resume reused)."""

    def stage(self, subject: str, stage: str) -> None: ...

    def record(self, record: RunRecord, done: int, total: int) -> None: ...

    def stop(self) -> None: ...


class PlainProgress(Progress):
    """Lines a CI log keeps: a line per finished record, the start and end of each long stage that lasts
    past `ANNOUNCE_S` (a cache hit or a model already built says nothing), a heartbeat (see the module
    docstring); `verbose` adds the short stages."""

    def __init__(self, stream: IO[str] | None = None, *, quiet: bool = False, verbose: bool = False,
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self.stream, self.quiet, self.verbose, self.heartbeat_s = stream, quiet, verbose, heartbeat_s
        self.running: dict[tuple[str, str], tuple[float, bool]] = {}  # (stage, subject) → (start, announced)
        self.done, self.total = 0, 0
        self.started = self.last_line = time.monotonic()
        self._lock = threading.RLock()  # the heartbeat's thread reads what the run's thread writes
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def _print(self, text: str) -> None:
        with self._lock:
            print(printable(text), file=self.stream or sys.stderr, flush=True)
            self.last_line = time.monotonic()

    def start(self, total: int, done: int = 0) -> None:
        self.total, self.done = total, done
        self.started = self.last_line = time.monotonic()
        if self.quiet:
            return
        noun = "variant" if total == 1 else "variants"
        self._print(f"{total - done} of {total} {noun} to run" if done else f"{total} {noun} to run")
        self._beat = threading.Thread(target=self._watch, name="mlbench-heartbeat", daemon=True)
        self._beat.start()

    def note(self, text: str) -> None:
        if not self.quiet:
            self._print(text)

    def stage(self, subject: str, stage: str) -> None:
        if self.quiet:
            return
        with self._lock:
            now = time.monotonic()
            if stage == "exported":  # a parallel export's end: what built its artifact is over
                self._end(lambda key: _within(subject, key[1]), now, say=True)
            if stage not in LONG_STAGES:
                if self.verbose:
                    self._print(f"  … {stage} {subject}")
                return
            new = (stage, subject)  # a stage inside another begins: that one is over
            self._end(lambda key: key != new and _within(subject, key[1]), now, say=True)
            if new not in self.running:
                self.running[new] = (now, self.verbose)
                if self.verbose:
                    self._print(f"  start {stage} {subject}")

    def _end(self, ended: Callable[[tuple[str, str]], bool], now: float, *, say: bool) -> None:
        for key in [key for key in self.running if ended(key)]:
            began, announced = self.running.pop(key)
            if say and announced and key[0] != "measure":  # a measurement's end is its record's line
                self._print(f"  done  {key[0]} {key[1]} in {clock(now - began)}")

    def record(self, record: RunRecord, done: int, total: int) -> None:
        with self._lock:
            self.done = done
            self._end(lambda key: _within(record.variant_id, key[1]), time.monotonic(), say=False)  # its line ends it
            if not self.quiet:
                self._print(record_line(record, done, total))

    def _watch(self) -> None:
        """The heartbeat's thread: announces the stages running past ANNOUNCE_S, and says what runs when
        nothing was printed for `heartbeat_s`."""
        while not self._stop.wait(min(0.25, self.heartbeat_s / 4)):
            with self._lock:
                now = time.monotonic()
                for (stage, subject), (began, announced) in list(self.running.items()):
                    if not announced and now - began >= ANNOUNCE_S:
                        self.running[(stage, subject)] = (began, True)
                        self._print(f"  start {stage} {subject}")
                if now - self.last_line < self.heartbeat_s:
                    continue
                running = ", ".join(f"{stage} {subject} ({clock(now - began)})"
                                    for (stage, subject), (began, _) in self.running.items())
                self._print(f"  … {clock(now - self.started)} in, {self.done}/{self.total} done; running: "
                            f"{running or 'a child process starting (interpreter and imports)'}")

    def stop(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=2)


def _within(inner: str, outer: str) -> bool:
    """Whether the subject `inner` is `outer` or lies inside it: a model holds its artifacts (`tiny` holds
    `tiny/coreml/float16`), an artifact its variants (`tiny/torch/float32` holds `tiny/torch/cpu/float32`: an
    artifact's id is its variants' without the measurement-only axes, so its parts come in theirs, in order)."""
    if inner == outer:
        return True
    inner_parts, outer_parts = inner.split("/"), outer.split("/")
    if inner_parts[0] != outer_parts[0] or len(outer_parts) >= len(inner_parts):
        return False
    rest = iter(inner_parts[1:])
    return all(part in rest for part in outer_parts[1:])  # a subsequence: `in` consumes the iterator


class Eta:
    """The time left, from the records this run finished (a resume's reused ones took no time here), counting
    down while a variant runs: once it runs past what the others took, the display says so instead of standing
    at a figure that is already wrong."""

    def __init__(self, done: int = 0) -> None:
        self.first_done, self.done = done, done
        self.started = self.last = time.monotonic()

    def finished(self, done: int) -> None:
        self.done, self.last = done, time.monotonic()

    def text(self, total: float, done: int, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        measured, left = self.done - self.first_done, int(total) - done
        if left <= 0:
            return "ETA 0:00:00"
        if measured <= 0:
            return "ETA -:--:--"
        each = (self.last - self.started) / measured
        running = now - self.last
        if running <= each:
            return f"ETA {_hms(each * left - running)}"
        rest = f", then ~{_hms(each * (left - 1))}" if left > 1 else ""
        return f"ETA: running {_hms(running)} (others took {_hms(each)}){rest}"


def _hms(seconds: float) -> str:
    whole = max(0, round(seconds))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class LiveProgress(Progress):
    """rich's live display: current variant and stage, done/total, elapsed and ETA; records scroll above."""

    def __init__(self, console=None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress
        from rich.text import Text

        live = self

        class EtaColumn(ProgressColumn):
            def render(self, task: Any) -> Text:
                return Text(live.eta.text(task.total or 0, int(task.completed)))

        self.console = console or Console(stderr=True)
        self.eta = Eta()
        self.bar = RichProgress(
            TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            EtaColumn(), console=self.console, transient=True,
        )
        self.task: TaskID | None = None

    def start(self, total: int, done: int = 0) -> None:
        self.eta = Eta(done)
        self.bar.start()
        self.task = self.bar.add_task("starting", total=total, completed=done)

    def stage(self, subject: str, stage: str) -> None:
        if self.task is not None:
            self.bar.update(self.task, description=printable(f"{stage:<7} {subject}"))

    def note(self, text: str) -> None:
        self.bar.console.print(printable(text), highlight=False, markup=False)

    def record(self, record: RunRecord, done: int, total: int) -> None:
        self.eta.finished(done)
        self.bar.console.print(record_line(record, done, total), highlight=False, markup=False)
        if self.task is not None:
            self.bar.update(self.task, completed=done)

    def stop(self) -> None:
        self.bar.stop()


def for_terminal(*, quiet: bool, verbose: bool) -> Progress:
    """Live on an interactive terminal outside CI; plain lines everywhere else."""
    interactive = sys.stderr.isatty() and not os.environ.get("CI") and os.environ.get("TERM") != "dumb"
    if interactive and not quiet and not verbose:
        return LiveProgress()
    return PlainProgress(quiet=quiet, verbose=verbose)
