"""A report file read back (`compare`, `calibrate`): only a regular file, of a bounded size, never waited on (a
FIFO given as a report is refused, not read for ever); numbers as JSON writes them, without Python's int-digit
limit turning a 5,000-digit number into a traceback; figures strictly typed (`true` is not a latency of 1)."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from mlbench.errors import UserError

if TYPE_CHECKING:
    from mlbench.records import RunReport

MAX_REPORT_BYTES = 1 << 30
"""A report of a million raw samples per variant is tens of megabytes; 1 GiB is no report."""
MAX_DIGITS = 400
"""No figure mlbench writes has more digits (a float's exponent tops at 308)."""
TOO_DEEP = "not an mlbench report: its JSON is nested too deeply to read"


def read_regular(path: Path, limit: int = MAX_REPORT_BYTES) -> bytes:
    """The bytes of a regular file; one line for anything else (a FIFO, a device, a folder) or one too big."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO or socket nobody serves
            raise UserError("not a regular file; give a report.json", file=path) from None
        reason = exc.strerror or str(exc)
        raise UserError(f"cannot read: {reason[:1].lower()}{reason[1:]}", file=path) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UserError("not a regular file; give a report.json", file=path)
        if info.st_size > limit:
            raise UserError(f"is {info.st_size:,} bytes, more than a report can be ({limit:,}); give a report.json",
                            file=path)
        return handle.read(limit + 1)


def _integer(path: Path):
    def parse(text: str) -> int:
        if len(text.lstrip("-")) > MAX_DIGITS:
            raise UserError(f"not an mlbench report: a number of {len(text.lstrip('-')):,} digits (no figure has more "
                            f"than {MAX_DIGITS})", file=path)
        return int(text)
    return parse


def read_report_file(path: Path, *, checked: bool = True) -> RunReport:
    """The report in `path`, or one UserError line naming the file (and the place, when one applies).
    `checked`: also refuse impossible figures and repeated variants (`report_check`)."""
    from pydantic import ValidationError

    from mlbench.compare.report_check import check_metric_values, check_report
    from mlbench.config.pipeline_file import format_where
    from mlbench.records import RunReport

    try:
        text = read_regular(path).decode("utf-8")
    except UnicodeDecodeError:
        raise UserError("not an mlbench report: not UTF-8 text", file=path) from None
    try:
        data = json.loads(text, parse_int=_integer(path))
    except json.JSONDecodeError as exc:
        raise UserError(f"not an mlbench report: invalid JSON at line {exc.lineno} column {exc.colno}",
                        file=path) from None
    except RecursionError:
        raise UserError(TOO_DEEP, file=path) from None
    if checked:
        check_metric_values(data, path)
    try:  # strict: a JSON `true` or "12" where a figure stands is refused, not read as 1 or 12
        report = RunReport.model_validate(data, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = format_where(tuple(first["loc"])) or "top level"
        raise UserError(f"not an mlbench report: {where}: {first['msg']}", file=path) from None
    except RecursionError:
        raise UserError(TOO_DEEP, file=path) from None
    if checked:
        check_report(report, path)
    return report
