"""The error bands of one report column in words, each shared clause said once.

A chip without calibration rows gives its estimates several bands (mostly fixed and per-op cost or not,
each maybe widened for a compressed variant), and every band's basis repeats where the costs came from. Said
band by band, one column's note ran to 3,400 characters of a pull-request comment; said here, what all the
bands share comes once, after each band's own figures and words."""

from __future__ import annotations

from mlbench.records import Band


def basis_clauses(basis: str) -> list[str]:
    """`basis` split at each '; ' outside parentheses: the clauses bases are built from."""
    clauses: list[str] = []
    depth = start = 0
    for i, char in enumerate(basis):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif depth == 0 and basis.startswith("; ", i):
            clauses.append(basis[start:i])
            start = i + 2
    clauses.append(basis[start:])
    return clauses


def _figures(band: Band) -> str:
    return f"off by ×{band.median_ratio:.2f} typically, ×{band.worst_ratio:.2f} at worst"


def describe_bands(bands: list[Band]) -> str:
    """'off by ×a typically, ×b at worst (basis)' for one band; for several, each band's figures with the
    clauses only it has, then the clauses all of them share once."""
    if not bands:
        return ""
    if len(bands) == 1:
        return f"{_figures(bands[0])} ({bands[0].basis})"
    split = [basis_clauses(band.basis) for band in bands]
    shared = [clause for clause in split[0] if all(clause in other for other in split[1:])]
    said = []
    for band, clauses in zip(bands, split):
        own = [clause for clause in clauses if clause not in shared]
        said.append(f"{_figures(band)} ({'; '.join(own)})" if own else _figures(band))
    text = "; ".join(said)
    return f"{text}; each band: {'; '.join(shared)}" if shared else text
