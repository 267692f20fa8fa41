"""Each child's own temporary folder, removed when the child ends, however it ends.

Converters write intermediate files to the temporary folder and count on the interpreter's exit to remove
them: coremltools saves every converted or compressed program as a fresh ``tmpXXXXXXXX.mlpackage`` there and
removes it in an ``atexit`` hook (``coremltools/models/model.py``). A child forked from the fork server ends
with ``os._exit`` (no hooks), and one killed for a time or memory limit runs nothing: Core ML exports in such
children left their packages behind, 76 KB to 330 MB each (538 of them, 8.3 GB, in a day of this project's
own test suites and runs on one machine).

So a child points ``tempfile`` and TMPDIR at ``<temp>/mlbench-child-<pid>`` first thing, and it is removed
by the child itself when it is told to exit; by the coordinator after it reaps a child it killed or that
died (`children.Child.kill`), and at its own exit for children it let exit in the background (they die
with it, by the parent-death signal, before their own cleanup); and by the next pool started on this
machine for the children of a coordinator that was killed (``remove_orphans``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "mlbench-child-"
_own: list[Path] = []  # this process's folder, once `use_own_folder` made it
_children: set[int] = set()  # the children of this process whose folders may still be there


def folder_for(pid: int, base: str | None = None) -> Path:
    """The temporary folder of the child `pid`, under `base` (the temporary folder this process was given)."""
    return Path(base or tempfile.gettempdir()) / f"{PREFIX}{pid}"


def use_own_folder() -> Path | None:
    """In a child: make a fresh folder for this process and send every temporary file there (this
    process's `tempfile` and, through TMPDIR, what the model starts). None, changing nothing, where the
    folder cannot be made: a child never fails for want of it."""
    folder = folder_for(os.getpid())
    shutil.rmtree(folder, ignore_errors=True)  # a process of the same pid that was killed before its cleanup
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = str(folder)
    _own[:] = [folder]
    return folder


def remove_own() -> None:
    """In a child about to end: remove its folder (nothing when `use_own_folder` was not called)."""
    for folder in _own:
        shutil.rmtree(folder, ignore_errors=True)


def track_child(pid: int | None) -> None:
    """In a coordinator: the child `pid` has made its folder; this process removes it at its exit if the
    child has not by then (`remove_child_folder`)."""
    if pid is not None and pid > 0:
        _children.add(pid)


def remove_child_folder(pid: int | None, base: str | None = None) -> None:
    """Remove the folder of the child `pid`, once it has ended (nothing when there is none)."""
    if pid is not None and pid > 0:
        shutil.rmtree(folder_for(pid, base), ignore_errors=True)
        _children.discard(pid)


@atexit.register
def _remove_children_folders() -> None:
    """The folders of the children still exiting as this process ends: the idle ones closed in the background
    (`children.ChildPool.close_in_background`), which the parent-death signal kills before their own cleanup."""
    for pid in list(_children):
        remove_child_folder(pid)


def remove_orphans(base: str | None = None) -> int:
    """Remove the folders, under `base`, of this user's children that are no longer running; how many."""
    removed = 0
    root = Path(base or tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for entry in root.iterdir():
            pid = _pid_of(entry)
            if pid is None or _running(pid):
                continue
            with contextlib.suppress(OSError):
                if entry.stat().st_uid != os.getuid():
                    continue
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


def _pid_of(entry: Path) -> int | None:
    suffix = entry.name[len(PREFIX):] if entry.name.startswith(PREFIX) else ""
    return int(suffix) if suffix.isdigit() and int(suffix) > 0 else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: its folder is not this user's to judge
        return True
    return True
