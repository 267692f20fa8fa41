"""Sizes and counts as people read and write them: `5GB`, `44.7 MB`, `553.1 K`.

One module so the cache commands, the reports and `mlbench inspect` speak the same units
(decimal: 1 kB = 1000 B, as disk tools and `--max-size 5GB` do).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from mlbench.errors import UserError

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*")


def parse_size(text: str | int) -> int:
    """Bytes from a user's size: ``123``, ``500MB``, ``5GB`` (powers of 1000), ``1.5GiB`` (1024)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise UserError(f"invalid size '{text}': use e.g. 500MB, 5GB")
        return text
    m = _SIZE_RE.fullmatch(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise UserError(f"invalid size '{text}': use e.g. 500MB, 5GB")
    try:
        return int(Decimal(m.group(1)) * _UNITS[unit])
    except InvalidOperation:
        raise UserError(f"invalid size '{text}': use e.g. 500MB, 5GB") from None


def format_size(n: int) -> str:
    """``"44.7 MB"``: decimal units, one decimal; plain bytes below 1 kB."""
    if n < 0:
        raise ValueError("format_size: negative size")
    if n < 1000:
        return f"{n} B"
    for unit, scale in (("kB", 10**3), ("MB", 10**6), ("GB", 10**9), ("TB", 10**12)):
        if round(n / scale, 1) < 1000:
            return f"{n / scale:.1f} {unit}"
    return f"{n / 10**15:.1f} PB"


def human_bytes(n: int | None) -> str:
    """format_size, with 'n/a' for a size that was not analysed."""
    return "n/a" if n is None else format_size(n)


def human_count(n: int | None) -> str:
    """553120 -> '553.1 K'; 1722 -> '1.7 K'; 12 -> '12'; None -> 'n/a'."""
    if n is None:
        return "n/a"
    if abs(n) < 1000:
        return str(n)
    value = float(n)
    for unit in ("K", "M", "G", "T", "P"):
        value /= 1000.0
        if abs(value) < 1000 or unit == "P":
            return f"{value:.1f} {unit}"
    return str(n)  # pragma: no cover
