"""Which build folders in the cache's tmp/ belong to dead processes: a folder is named
`build-KEY-HOST.PID-…` by the process building it, so the next run on this machine can tell when that
process is gone; folders of other machines (a shared cache) are judged by age alone."""

from __future__ import annotations

import os
import re

_BUILD_RE = re.compile(r"build-[0-9a-f]{12}-(?P<host>[0-9a-f]{8})\.(?P<pid>\d+)-")


def host_tag() -> str:
    """This machine, as 8 hex characters (a shared cache folder may be used from several machines)."""
    import hashlib
    import socket

    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def build_owner_dead(name: str) -> bool:
    """True for a build folder (`build-KEY-HOST.PID-…`) whose process, on this machine, is gone."""
    match = _BUILD_RE.match(name)
    if match is None or match["host"] != host_tag():
        return False
    try:
        os.kill(int(match["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):  # alive under another user; or not a pid at all
        return False
    return False

