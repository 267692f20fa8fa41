"""ExecuTorch's thread pool under the stall check (`mlbench.thread_check`).

ExecuTorch 1.x runs XNNPACK (and its optimized kernels) on one process-wide pool, sized at first use to the
machine's processors (`extension/threadpool/threadpool.cpp`, `get_threadpool`). Its Python bindings expose
only `_threadpool_get_thread_count()` and `_unsafe_reset_threadpool(n)` (`executorch.extension.pybindings.
portable_lib`, marked experimental), and the reset replaces the pool: a method loaded before it keeps the old
pool's pointer (XNNPACK's `xnn_create_runtime_v4` takes `get_pthreadpool()` when the method is loaded,
`backends/xnnpack/runtime/XNNCompiler.cpp`), and calling it after the reset would use freed memory. So a
switch releases the loaded method first, resets the pool, then loads the method again: the one-thread side
of the check, and the timed calls when the pool is stalled, run on a method loaded with that pool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def pool() -> Any:
    """ExecuTorch's bindings (the module `executorch.runtime` loads programs with)."""
    import executorch.extension.pybindings.portable_lib as bindings

    return bindings


class PoolSwitch:
    """The loaded method and the pool it runs on, switched together (`set_threads` for `check_threads`).

    `holder` is a one-item list owning the method: the caller keeps no other reference, so that releasing it
    here frees the XNNPACK runtime before the pool it points at goes."""

    def __init__(self, holder: list[Any], load: Callable[[], Any]) -> None:
        self.holder, self.load = holder, load

    @staticmethod
    def configured() -> int:
        return int(pool()._threadpool_get_thread_count())

    def __call__(self, count: int) -> None:
        if self.configured() == count:
            return
        self.holder[0] = None  # the method goes first: it holds the pool the reset frees
        pool()._unsafe_reset_threadpool(count)
        self.holder[0] = self.load()

    def restore(self, count: int) -> None:
        """The pool back at `count` with no method loaded (the next variant's load takes it)."""
        self.holder[0] = None
        if self.configured() != count:
            pool()._unsafe_reset_threadpool(count)
