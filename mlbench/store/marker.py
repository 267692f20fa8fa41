"""What in a folder is mlbench's to delete: the cache root's tag, and the names mlbench gives what it
leaves in the cache's tmp/.

A cache root carries `CACHEDIR.TAG` (the cache directory tag of https://bford.info/cachedir/, which
backup tools also read) naming mlbench. Removing anything (`cache clear`, `cache prune`, `cache verify`,
the stale-build cleanup every run starts with) needs that tag, so pointing `--dir` or `cache: {dir: .}` at
a folder of one's own is refused in one line instead of emptying its `tmp/`. A folder that is missing or
empty becomes a cache (the tag is written); a cache written before the tag existed is recognised by its
layout (nothing but shard folders of key folders, tmp/ of mlbench's names, locks/ of key lock files, the stat
state) and tagged.

In tmp/, only `build-KEY-HOST.PID-…` folders (a build in progress or left by a dead process) and
`trash-HEX` (an eviction cut short) are mlbench's.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from mlbench.errors import UserError
from mlbench.store.entry import KEY_RE, LOCKS_DIR, SHARD_RE, TMP_DIR
from mlbench.store.state import STATE_FILES

TAG_NAME = "CACHEDIR.TAG"
TAG_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"
TAG_TEXT = (f"{TAG_SIGNATURE}\n# This file is a cache directory tag created by mlbench (its artifact cache).\n"
            "# For information about cache directory tags, see https://bford.info/cachedir/\n")
TMP_NAME_RE = re.compile(r"build-[0-9a-f]{12}-[0-9a-f]{8}\.\d+-[A-Za-z0-9_]+|trash-[0-9a-f]{32}")


def is_real_dir(path: Path) -> bool:
    """A folder, not a symlink to one (nothing is followed out of the cache)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def has_tag(root: Path) -> bool:
    try:
        fd = os.open(root / TAG_NAME, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        head = f.read(len(TAG_TEXT))
    return head.startswith(TAG_SIGNATURE.encode()) and b"mlbench" in head


def _looks_like_an_old_cache(root: Path, names: list[str]) -> bool:
    """Nothing but what mlbench puts in a cache: shard folders of key folders, tmp/ of mlbench's own
    names, the stat state."""
    if not all(SHARD_RE.fullmatch(n) or n in (TMP_DIR, LOCKS_DIR) or n in STATE_FILES for n in names):
        return False
    for name in names:
        folder = root / name
        if name in STATE_FILES:
            continue
        if not is_real_dir(folder):
            return False
        try:
            children = os.listdir(folder)
        except OSError:
            return False
        ours = (is_ours_in_tmp if name == TMP_DIR else is_lock_name if name == LOCKS_DIR else KEY_RE.fullmatch)
        if not all(ours(c) for c in children):
            return False
    return True


def not_a_cache(root: Path) -> UserError:
    return UserError(f"not an mlbench cache (it has no {TAG_NAME} written by mlbench, and other files); mlbench "
                     "removes only what is its own: give the cache an empty or new folder", file=root)


def claim(root: Path, *, create: bool) -> bool:
    """Check that ``root`` is mlbench's cache (False: there is no cache there yet and ``create`` is off);
    tag it when it is new, empty or an untagged old cache; raise a one-line UserError when it is not."""
    if has_tag(root):
        return True
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        if not create:
            return False
        names = []
    except NotADirectoryError:
        raise UserError("is not a folder; the cache needs a folder of its own", file=root) from None
    except OSError as exc:
        raise UserError(f"cannot read the cache folder: {exc.strerror}", file=root) from None
    names = [n for n in names if not n.startswith(f".{TAG_NAME}.")]  # another run tagging it right now
    if names and not _looks_like_an_old_cache(root, names):
        if has_tag(root):  # another run tagged it (and began using it) between the first look and the listing
            return True
        raise not_a_cache(root)
    if not names and not create:
        return False
    root.mkdir(parents=True, exist_ok=True)
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=root, prefix=f".{TAG_NAME}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(TAG_TEXT)
        os.chmod(tmp, 0o644)
        os.link(tmp, root / TAG_NAME)  # whole or not at all, and never over something already there
    except FileExistsError:
        if not has_tag(root):  # another run tagged it first, or a file of that name is not ours
            raise not_a_cache(root) from None
    except OSError:  # a file system without hard links: the same text, so replacing a concurrent tag is harmless
        os.replace(tmp, root / TAG_NAME)
        return True
    finally:
        Path(tmp).unlink(missing_ok=True)
    return True


def is_lock_name(name: str) -> bool:
    return name.endswith(".lock") and KEY_RE.fullmatch(name.removesuffix(".lock")) is not None


def is_ours_in_tmp(name: str) -> bool:
    return TMP_NAME_RE.fullmatch(name) is not None
