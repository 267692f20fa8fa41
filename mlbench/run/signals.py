"""SIGINT and SIGTERM take one path: Ctrl-C, `timeout`, a CI cancel and `docker stop` all stop the run the same
way (children stopped, the partial report written in every format, the resume hint), exiting 130 or 143.

`stopping_on_sigterm()` turns SIGTERM into `Stopped`, a KeyboardInterrupt, so every place that already cleans
up after Ctrl-C cleans up after it too. `signals_deferred()` holds both signals back while the reports are
written: a second Ctrl-C waits for the files instead of leaving report.json new and report.html old.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

SIGNALS: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """The run was stopped by a signal; `exit_code` is 128 + its number (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.partial_written: bool | None = None  # set once the partial report was (or could not be) written
        self.why_not: str | None = None

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def stopping_on_sigterm() -> Iterator[None]:
    """SIGTERM raises `Stopped(SIGTERM)` in the main thread while inside (elsewhere: nothing changes)."""
    if not _main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def signals_deferred() -> Iterator[list[int]]:
    """SIGINT and SIGTERM are noted, not acted on, while inside: what is being written is finished first.
    Yields the list of the signals that came."""
    came: list[int] = []
    if not _main_thread():
        yield came
        return
    previous: dict[int, Any] = {}
    for signum in SIGNALS:
        previous[signum] = signal.signal(signum, lambda number, frame: came.append(number))
    try:
        yield came
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
