"""Quiet exporters: collect what converters log, warn and print, so the user's terminal stays
readable and the messages worth keeping land in the report (each backend shortens them its own
way; `distinct_lines` keeps each once)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence


class ListHandler(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(level=logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a malformed record must not break the export
            self.sink.append(record.getMessage())


@contextlib.contextmanager
def captured(sink: list[str], loggers: Sequence[str], *, stdout: bool = False) -> Iterator[None]:
    """Collect the named loggers' warnings and Python warnings into `sink`; swallow what is printed.

    Progress bars (tqdm) write to sys.stderr, so stderr is redirected for the duration (and stdout
    with `stdout=True`): anything else Python prints meanwhile is hidden too.
    """
    handler = ListHandler(sink)
    saved = [(logger, logger.propagate) for logger in map(logging.getLogger, loggers)]
    for logger, _ in saved:
        logger.addHandler(handler)
        logger.propagate = False
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as recorded:
            caught = recorded
            warnings.simplefilter("always")
            with contextlib.ExitStack() as stack:
                stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
                if stdout:
                    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
                yield
    finally:
        for logger, propagate in saved:
            logger.removeHandler(handler)
            logger.propagate = propagate
        for w in caught:
            sink.append(f"{getattr(w.category, '__name__', 'Warning')}: {w.message}")


def distinct_lines(messages: Iterable[str], shorten: Callable[[str], str]) -> list[str]:
    """The messages shortened to one line each, in order, empty and repeated lines left out."""
    out: list[str] = []
    for message in messages:
        line = shorten(message)
        if line and line not in out:
            out.append(line)
    return out


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Silence what native code writes to file descriptor 2 (a runtime's C++ log lines: ExecuTorch's cpuinfo
    `Reading file ...`, LiteRT's `INFO: Created TensorFlow Lite XNNPACK delegate for CPU.`), which Python's
    sys.stderr does not see."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
