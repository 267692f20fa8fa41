"""Thread limits while exports share the cores, so parallel processes do not oversubscribe them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def limited_threads(threads: int | None) -> Iterator[None]:
    """Fewer threads (torch's and the BLAS/OpenMP pools') while exports share the cores; the
    measurements that follow get them all back. None: no limit (the work has the cores to itself)."""
    if not threads:
        yield
        return
    import torch
    from threadpoolctl import threadpool_limits

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with threadpool_limits(limits=threads):
            yield
    finally:
        torch.set_num_threads(previous)
