"""User-facing errors: one line, a place when one applies, exit code 2, never a traceback."""

from __future__ import annotations

import functools
import re
import signal
from pathlib import Path


class UserError(Exception):
    """A mistake in what the user gave mlbench (a file, a flag, a model).

    Rendered as ``FILE:LINE:COL: where: what`` — or with the parts that are known — so an
    editor or CI log can jump to the place. The CLI prints it and exits with code 2.
    """

    exit_code = 2

    def __init__(
        self,
        what: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        col: int | None = None,
        where: str | None = None,
    ) -> None:
        self.what = what
        self.file = str(file) if file is not None else None
        self.line = line
        self.col = col
        self.where = where
        super().__init__(str(self))

    def __str__(self) -> str:
        parts: list[str] = []
        if self.file is not None:
            place = _escaped_breaks(self.file)  # a newline in a path never breaks the one-line FILE:LINE:COL
            if self.line is not None:
                place += f":{self.line}"
                if self.col is not None:
                    place += f":{self.col}"
            parts.append(place)
        if self.where:
            parts.append(_escaped_breaks(self.where))
        parts.append(self.what)
        return ": ".join(parts)


def _escaped_breaks(text: str) -> str:
    r"""`text` with its line breaks written as `\n` and `\r`: a path or a place stays on its line."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


class CannotWrite(UserError):
    """mlbench could not write one of its own files (a report, the journal, the lock, the cache, the history):
    one line naming the path and the operating system's reason. Exit code 3: the run could not finish."""

    exit_code = 3


def os_reason(exc: OSError) -> str:
    """What the operating system said, as a reader wants it: `No space left on device (ENOSPC)`."""
    import errno

    name = errno.errorcode.get(exc.errno or -1)
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{reason} ({name})" if name else reason


def cannot_write(exc: OSError, path: str | Path | None = None, what: str = "cannot write") -> CannotWrite:
    """The one line for a failed write: `PATH: cannot write: No space left on device (ENOSPC)`."""
    return CannotWrite(f"{what}: {os_reason(exc)}", file=path if path is not None else exc.filename)


class ReportableError(Exception):
    """A failure whose message is already written for the report (one line, no type name needed)."""


def short_error(exc: BaseException, limit: int = 300) -> str:
    """`Type: first line of the message`, cut to `limit` characters: what a report row can hold."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if isinstance(exc, ReportableError) and lines:
        text = lines[0]
    else:
        text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(text: str, limit: int = 200) -> str:
    """`text` on one line (each run of whitespace one space), cut to `limit` characters with an ellipsis.

    The shortening every exporter applies to what converters say, after its own clean-up.
    """
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception of a `raise ... from` chain: converters wrap the real reason (an unsupported
    op, a data-dependent branch) in generic 'failed to export' errors."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    return exc


def first_line(exc: BaseException | str, limit: int = 200, *, cause: bool = False, comments: bool = True) -> str:
    """The line that says what went wrong, named by its exception type, on one line and cut to `limit`: the
    one helper every exporter and model source uses for a failure's message. `cause`: of the root cause;
    `comments=False`: skipping `#` lines (a converter's hints); terminal colours are dropped."""
    if cause and isinstance(exc, BaseException):
        exc = root_cause(exc)
    text = _ANSI.sub("", str(exc)).strip()
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and (comments or not line.strip().startswith("#"))]
    first = lines[0] if lines else (type(exc).__name__ if isinstance(exc, BaseException) else "")
    if isinstance(exc, BaseException) and not first.startswith(type(exc).__name__):
        first = f"{type(exc).__name__}: {first}"
    return one_line(first, limit)


def user_frame(exc: BaseException) -> tuple[str, int, str] | None:
    """(file, line, function) of the innermost frame in the user's own files where `exc` (or, first, the
    exceptions it was raised from) passed: the place a failing model is reported at, as a reader wants it
    (`models.py:41 in forward`), not mlbench's or torch's frame that caught it. A file is the user's when it is
    neither mlbench's, nor the standard library's, nor an installed package's."""
    chain: list[BaseException] = []
    while exc is not None and all(exc is not seen for seen in chain):
        chain.append(exc)
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)  # type: ignore[assignment]
    library = _library_roots()
    for link in reversed(chain):  # the innermost exception first: where the trouble began
        found = None
        tb = link.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if not code.co_filename.startswith("<") and not code.co_filename.startswith(library):
                found = (code.co_filename, tb.tb_lineno, code.co_name)
            tb = tb.tb_next
        if found is not None:
            return found
    return None


@functools.cache
def _library_roots() -> tuple[str, ...]:
    """Folders whose files are never the user's: mlbench itself, the standard library, site-packages."""
    import os
    import site
    import sysconfig

    paths = {str(Path(__file__).resolve().parent)}
    paths.update(p for key in ("stdlib", "platstdlib", "purelib", "platlib")
                 if (p := sysconfig.get_paths().get(key)))
    try:
        paths.update(site.getsitepackages())
        paths.add(site.getusersitepackages())
    except AttributeError:  # a virtualenv's old site module
        pass
    roots = set()
    for path in paths:
        roots.update({path.rstrip(os.sep) + os.sep, os.path.realpath(path).rstrip(os.sep) + os.sep})
    return tuple(sorted(roots))


def frame_place(frame: tuple[str, int, str], base_dir: str | Path | None = None) -> str:
    """`models.py:41 in forward`: the file relative to the pipeline's folder when it lies there (as the pipeline
    names it), else in full."""
    file, line, function = frame
    if base_dir is not None:
        try:
            file = str(Path(file).resolve().relative_to(Path(base_dir).resolve()))
        except (ValueError, OSError):
            pass
    return f"{_escaped_breaks(file)}:{line} in {function}"


def located_error(exc: BaseException, base_dir: str | Path | None = None, limit: int = 300) -> str:
    """`short_error`, led by the user's frame it was raised in when there is one:
    `models.py:41 in forward: RuntimeError: shapes do not match`."""
    frame = user_frame(exc)
    text = short_error(exc, limit)
    return f"{frame_place(frame, base_dir)}: {text}" if frame is not None else text


SIGNAL_MEANING = {"SIGSEGV": "segmentation fault", "SIGBUS": "bus error", "SIGABRT": "abort",
                   "SIGFPE": "arithmetic error", "SIGILL": "illegal instruction",
                   "SIGKILL": "the system's out-of-memory killer, or another process"}


def exit_cause(returncode: int | None) -> str:
    """`was killed by SIGSEGV (segmentation fault)` or `exited with code 3`."""
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        meaning = SIGNAL_MEANING.get(name)
        return f"was killed by {name}" + (f" ({meaning})" if meaning else "")
    return f"exited with code {returncode}"
