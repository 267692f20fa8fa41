"""Progress of a run: a live display on a terminal, one plain line per record in CI or a pipe.

The runner calls these hooks and prints nothing itself; `quiet` silences the lines (errors still
reach stderr through the CLI), `verbose` adds a line per stage in plain mode.
"""

from __future__ import annotations

import os
import sys
from typing import IO, TYPE_CHECKING

from mlbench.records import RunRecord
from mlbench.report.text import printable
from mlbench.stability import metric_notes, suffix

if TYPE_CHECKING:
    from rich.progress import TaskID


def record_line(record: RunRecord, done: int, total: int) -> str:
    median = record.metrics.get("latency.median")
    figure = f"median {median.value:.3f} ms ({median.source})" if median and median.value is not None else ""
    if figure and median is not None:
        figure += suffix(median.stability)
    unstable = metric_notes(record.metrics)
    if unstable and record.status == "ok":  # a figure not to trust says so where it is first seen
        figure = f"{figure}  [{'; '.join(unstable)}]".strip()
    detail = record.error if record.status != "ok" else figure
    line = f"[{done:>{len(str(total))}}/{total}] {record.variant_id}  {record.status}  {detail or ''}".rstrip()
    return printable(line)  # a model's error text never drives the terminal


class Progress:
    """Silent base: the Python API's default."""

    def start(self, total: int, done: int = 0) -> None: ...

    def stage(self, subject: str, stage: str) -> None: ...

    def record(self, record: RunRecord, done: int, total: int) -> None: ...

    def stop(self) -> None: ...


class PlainProgress(Progress):
    """A line per finished record (and per stage with `verbose`): readable in CI logs."""

    def __init__(self, stream: IO[str] | None = None, *, quiet: bool = False, verbose: bool = False) -> None:
        self.stream, self.quiet, self.verbose = stream, quiet, verbose

    def _print(self, text: str) -> None:
        print(text, file=self.stream or sys.stderr, flush=True)

    def stage(self, subject: str, stage: str) -> None:
        if self.verbose and not self.quiet:
            self._print(f"  … {stage} {subject}")

    def record(self, record: RunRecord, done: int, total: int) -> None:
        if not self.quiet:
            self._print(record_line(record, done, total))


class LiveProgress(Progress):
    """rich's live display: current variant and stage, done/total, elapsed and ETA; records scroll above."""

    def __init__(self, console=None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        self.console = console or Console(stderr=True)
        self.bar = RichProgress(
            TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn(), console=self.console, transient=True,
        )
        self.task: TaskID | None = None

    def start(self, total: int, done: int = 0) -> None:
        self.bar.start()
        self.task = self.bar.add_task("starting", total=total, completed=done)

    def stage(self, subject: str, stage: str) -> None:
        if self.task is not None:
            self.bar.update(self.task, description=printable(f"{stage:<7} {subject}"))

    def record(self, record: RunRecord, done: int, total: int) -> None:
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
