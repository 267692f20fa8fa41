"""What coremltools says, made fit for a report: imported once without its import-time notices,
its log warnings, Python warnings and progress bars captured while it works, and its messages
shortened to one line, deduplicated and rid of the noise that says nothing about the user's model.

Kept apart from conversion so that reading a saved package (``analysis``) and the export options
(``deployment``) can use it without importing torch.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mlbench.backends.capture import captured, distinct_lines
from mlbench.errors import one_line

MAX_MESSAGE_CHARS = 200

_FX_UNSUPPORTED_RE = re.compile(r"Unsupported fx node (\S+?), kind (\S+)")

# Import-time messages that say nothing about the user's model on Linux / with our usage.
_DROP_PATTERNS = (
    re.compile(r"^Failed to load _ML\w*Proxy"),
    re.compile(r"^Failed to load '_ML\w*Proxy'"),
    re.compile(r"^scikit-learn version .* Disabling scikit-learn conversion API"),
    re.compile(r"torch\.jit\.trace(_method)? ?` is deprecated"),
    re.compile(r"^ERROR - converting '"),  # logged before raising; conversion names the op from it
    re.compile(r"^DeprecationWarning: "),  # coremltools/torch internals, not the user's business
    re.compile(r"^When both 'convert_to' and 'minimum_deployment_target' not specified"),
    re.compile(r"^ResourceWarning: Implicitly cleaning up"),  # coremltools' temporary weight dirs
    re.compile(r"^Output, '.*', of the source model, has been renamed to"),  # names are in the spec
    re.compile(r"has not been tested with coremltools"),  # replaced by version_warning()
)
_import_messages: list[str] = []
_ct_module: Any = None


def shorten_coremltools_message(exc: BaseException | str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """One line (≤ ``limit`` chars) that says what went wrong, without tracebacks or op dumps.

    Keeps the first meaningful line; when that line only announces a list ("...!" or "...:"),
    the next line is kept too (e.g. "Tracing failed sanity checks! ERROR: Graphs differed
    across invocations!").
    """
    raw = exc if isinstance(exc, str) else str(exc)
    if not isinstance(exc, str) and isinstance(exc, KeyError) and len(exc.args) == 1:
        raw = str(exc.args[0])  # KeyError's str() adds quotes
    lines = [line for line in raw.splitlines() if line.strip()]
    # Drop traceback blocks that some libraries embed in the message.
    lines = [
        line
        for line in lines
        if not line.startswith(("Traceback (most recent call last)", "  File \"", "    "))
    ] or lines
    if not lines:
        name = type(exc).__name__ if not isinstance(exc, str) else "error"
        return name
    text = lines[0].strip()
    if len(lines) > 1 and text.endswith(("!", ":")) and not lines[1][:1].isspace():
        text = f"{text} {lines[1].strip()}"
    match = _FX_UNSUPPORTED_RE.search(text)
    if match:
        text = f"PyTorch convert function for op '{match.group(2)}' not implemented (torch.export graph)"
    if not isinstance(exc, str) and text in ("", "None"):
        text = type(exc).__name__
    return one_line(text, limit)


def coremltools_captured(sink: list[str]) -> Any:
    """coremltools' log warnings, Python warnings and progress bars, collected into ``sink``."""
    return captured(sink, ["coremltools"])


def clean_warnings(messages: list[str]) -> list[str]:
    """The messages worth a report line, shortened, each once."""
    kept = (message.strip().removeprefix("UserWarning: ") for message in messages)
    return distinct_lines(
        (message for message in kept if not any(p.search(message) for p in _DROP_PATTERNS)),
        shorten_coremltools_message,
    )


def import_messages() -> list[str]:
    """What coremltools said when it was imported (cleaned), once per process."""
    return list(_import_messages)


def version_warning(ct: Any) -> list[str]:
    """coremltools' "Torch version X has not been tested" warning, once per result.

    coremltools logs it only when it is first imported (possibly by someone else), so it is
    recomputed here from the same numbers.
    """
    try:
        import torch
        from packaging.version import Version

        newest = getattr(ct._deps, "_TORCH_MAX_VERSION", None)
        current = re.match(r"\d+\.\d+\.\d+", torch.__version__)
        if newest and current and Version(current.group(0)) > Version(newest):
            return [(
                f"torch {current.group(0)} has not been tested with coremltools {ct.__version__} "
                f"(newest tested: torch {newest})"
            )]
    except Exception:  # noqa: BLE001, S110 # pragma: no cover - only a warning
        pass
    return []


@contextmanager
def _hidden(module: str) -> Iterator[None]:
    """`import module` fails inside this block (unless it was imported already) and works again after it."""
    if module in sys.modules:
        yield
        return
    sys.modules[module] = None  # type: ignore[assignment]  # the import system's "not importable" mark
    try:
        yield
    finally:
        if sys.modules.get(module, 0) is None:
            del sys.modules[module]


def import_coremltools() -> Any:
    """Import coremltools once, keeping its import-time log lines out of the user's terminal.

    coremltools imports scikit-learn (and with it scipy) when it is imported, only to offer its sklearn
    converters, which mlbench never calls: 1.1 s of every fresh child's start on a 2-core Linux machine
    (5.6 s → 4.5 s for torch and coremltools). It is hidden during that import only: a user's model
    imports it as usual afterwards."""
    global _ct_module
    if _ct_module is None:
        messages: list[str] = []
        with coremltools_captured(messages), _hidden("sklearn"):
            import coremltools as ct
            import coremltools.optimize.coreml
        _import_messages.extend(clean_warnings(messages))
        _ct_module = ct
    return _ct_module
