"""The source line an exported op came from: the innermost frame of a recorded Python stack outside torch
(for a `nn.Linear`, the line of the model's code that called it). Stacks come as torch.export's
`stack_trace` (`File "x.py", line 8, in forward`, outermost first) or TorchScript's source range
(`x.py(8): forward`, innermost first)."""

from __future__ import annotations

import os
import re

__all__ = ["module_path", "op_kind", "script_frames", "trace_frames", "user_frame", "wrapper_prefix"]

_PY_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (.*)$', re.MULTILINE)
_TS_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")


def trace_frames(stack_trace: str | None) -> list[tuple[str, int]]:
    """(file, line) of a torch.export stack trace, innermost first."""
    return [(m.group(1), int(m.group(2))) for m in _PY_FRAME.finditer(stack_trace or "")][::-1]


def script_frames(source_range: str) -> list[tuple[str, int]]:
    """(file, line) of a TorchScript node's source range, innermost first."""
    frames = []
    for text in source_range.splitlines():
        match = _TS_FRAME.match(text.strip())
        if match:
            frames.append((match.group(1), int(match.group(2))))
    return frames


def user_frame(frames: list[tuple[str, int]]) -> tuple[str | None, int | None]:
    """The innermost frame outside torch (frames innermost first)."""
    import torch

    library = os.path.dirname(torch.__file__) + os.sep
    for file, line in frames:
        if not file.startswith(library) and not file.startswith("<"):
            return file, line
    return None, None


def op_kind(kind: str) -> str:
    """``aten::relu_`` or ``aten.relu_.default`` -> ``relu``: the op without namespace, overload or in-place mark."""
    kind = kind.split("::")[-1]
    parts = kind.split(".")
    if len(parts) >= 2 and parts[0] in ("aten", "prims", "torch"):
        kind = parts[1] if parts[0] != "torch" or len(parts) < 4 else parts[3]
    elif len(parts) >= 2:
        kind = parts[0]
    return kind.rstrip("_")


def wrapper_prefix(module: object) -> str:
    """``module.`` when ``module`` is mlbench's own calling-convention wrapper (``BoundModule``, for Hugging Face
    models): the user's model is its ``module`` attribute, and paths read as the user's model names them."""
    from mlbench.sources.binding import BoundModule

    return "module." if isinstance(module, BoundModule) else ""


def module_path(path: str, prefix: str) -> str:
    """``path`` without the wrapper's ``prefix`` (the wrapped model itself is '')."""
    if not prefix:
        return path
    if path == prefix.rstrip("."):
        return ""
    return path.removeprefix(prefix)
