"""Safe YAML loading for pipeline files: plain data only, with 1-based positions for messages.

Why not ``yaml.safe_load``: it forgets where values came from, accepts duplicate keys silently,
expands alias bombs eagerly and can die with RecursionError. Here we read PyYAML's *event*
stream (libyaml when available, for speed) and compose it ourselves, iteratively, so every
refusal is one ``UserError`` line at the exact place, and no tag is ever constructed beyond
str/int/float/bool/null. No torch, nothing heavy: this runs on the ``mlbench validate`` path.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent, MappingStartEvent, ScalarEvent, SequenceStartEvent, StreamEndEvent
from yaml.nodes import ScalarNode

from mlbench.errors import UserError

MAX_BYTES = 5 * 1024 * 1024
MAX_NODES = 100_000
MAX_DEPTH = 64

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # tests swap this to cover both
_RESOLVER = yaml.resolver.Resolver()
_SC = yaml.constructor.SafeConstructor()
_T = "tag:yaml.org,2002:"
_MAP, _SEQ, _STR, _MERGE = _T + "map", _T + "seq", _T + "str", _T + "merge"
_SCALARS = {  # the only tags we construct; timestamps and '=' stay text on purpose
    _STR: str, _T + "timestamp": str, _T + "value": str, _MERGE: str,
    _T + "null": _SC.construct_yaml_null, _T + "bool": _SC.construct_yaml_bool,
    _T + "int": _SC.construct_yaml_int, _T + "float": _SC.construct_yaml_float,
}
_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", type(None): "null"}
# Same set PyYAML's reader accepts; checked up front so the place is exact on both backends.
_NON_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True)
class LoadedYaml:
    """A parsed pipeline file: plain Python ``data`` plus where each value and key came from."""

    path: Path
    data: Any
    sha256: str = ""  # of the bytes that were parsed, so a report names exactly what was validated
    _values: dict = field(default_factory=dict, repr=False, compare=False)
    _keys: dict = field(default_factory=dict, repr=False, compare=False)
    _yaml11_words: dict = field(default_factory=dict, repr=False, compare=False)

    def yaml11_boolean(self, loc: Sequence[str | int]) -> str | None:
        """The word (`on`, `No`...) when the value at ``loc`` is a boolean only under YAML 1.1.

        PyYAML follows YAML 1.1, where yes/no/on/off are booleans; editors and most other
        tools follow YAML 1.2, where they are text. Validation uses this to refuse such a value
        with a hint instead of silently reading what a reviewer reads as text as true/false."""
        return self._yaml11_words.get(tuple(loc))

    def yaml11_booleans(self) -> dict[tuple[str | int, ...], str]:
        """Every such value: its place → the word written."""
        return dict(self._yaml11_words)

    def locate(self, loc: Sequence[str | int], *, key: bool = False) -> tuple[int, int] | None:
        """1-based (line, col) of the value at ``loc``; ``key=True``: of the key naming it.

        Falls back to the deepest known prefix, so a validator can always point somewhere
        useful (e.g. the mapping that lacks a required key)."""
        loc = tuple(loc)
        if key and loc in self._keys:
            return self._keys[loc]
        for n in range(len(loc), -1, -1):
            if loc[:n] in self._values:
                return self._values[loc[:n]]
        return None


def load_yaml(path: str | Path) -> LoadedYaml:
    """Read ``path`` (bytes, at most 5 MB) and load it; every failure is one ``UserError`` line."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        reason = e.strerror or str(e)
        raise UserError(f"cannot read: {reason[:1].lower()}{reason[1:]}", file=path) from None
    return load_yaml_text(raw, path)


def _digest(text: str | bytes) -> str:
    return hashlib.sha256(text if isinstance(text, bytes) else text.encode("utf-8")).hexdigest()


def load_yaml_text(text: str | bytes, path: str | Path) -> LoadedYaml:
    """Load YAML from memory; ``path`` is only used in messages and in the result."""
    sha256 = _digest(text)
    if isinstance(text, bytes):
        text = _decode(text, path)
    elif text.startswith("\ufeff"):
        text = text[1:]
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise UserError("the file is larger than 5 MB; a pipeline file is a few KB", file=path)
    bad = _NON_PRINTABLE.search(text)
    if bad:
        line, col = _line_col(text, bad.start())
        raise UserError(f"non-printable character U+{ord(bad.group()):04X} is not allowed in YAML",
                        file=path, line=line, col=col)
    loader = _Loader(text)
    try:
        root = _compose(loader, path)
    except yaml.MarkedYAMLError as e:
        raise _syntax_error(e, text, path) from None
    except yaml.YAMLError as e:  # e.g. a ReaderError; should not happen after the checks above
        raise UserError(str(e).splitlines()[0], file=path) from None
    except RecursionError:
        raise UserError(f"nesting is deeper than {MAX_DEPTH} levels", file=path) from None
    finally:
        loader.dispose()
    values: dict = {}
    keys: dict = {}
    words: dict = {}
    data = _build(root, (), values, keys, words)
    return LoadedYaml(Path(path), data, sha256, values, keys, words)


def _decode(raw: bytes, path: str | Path) -> str:
    """UTF-8 (an optional BOM is dropped); anything else is refused at the first bad byte."""
    if len(raw) > MAX_BYTES:
        raise UserError("the file is larger than 5 MB; a pipeline file is a few KB", file=path)
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise UserError("the file is UTF-16; save it as UTF-8", file=path, line=1, col=1)
    bom = 3 if raw.startswith(b"\xef\xbb\xbf") else 0
    try:
        return raw[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        at = bom + e.start
        start = raw.rfind(b"\n", 0, at) + 1
        col = len(raw[max(start, bom):at].decode("utf-8", "replace")) + 1
        raise UserError(f"not valid UTF-8: byte 0x{raw[at]:02x} at offset {at}",
                        file=path, line=raw.count(b"\n", 0, at) + 1, col=col) from None


def _line_col(text: str, pos: int) -> tuple[int, int]:
    return text.count("\n", 0, pos) + 1, pos - text.rfind("\n", 0, pos)


def _syntax_error(e: yaml.MarkedYAMLError, text: str, path: str | Path) -> UserError:
    """PyYAML's problem (plus its context when that points elsewhere) as one line."""
    mark = e.problem_mark or e.context_mark
    what = e.problem or e.context or "invalid YAML"
    if what == "exceeded maximum nesting depth":  # libyaml's own cap (1000) hit first
        what = f"nesting is deeper than {MAX_DEPTH} levels"
    if mark is not None and "cannot start any token" in what:
        lines = text.splitlines()
        if mark.line < len(lines) and lines[mark.line][mark.column:mark.column + 1] == "\t":
            what = "found a tab, which cannot start any token; indent YAML with spaces"
    cm = e.context_mark
    if e.context and e.problem and cm is not None and mark is not None and cm.line != mark.line:
        what += f" ({e.context} at line {cm.line + 1})"
    line = mark.line + 1 if mark is not None else None
    return UserError(what, file=path, line=line, col=mark.column + 1 if mark is not None else None)


class _Node:
    """A composed node. ``size``/``height`` are *after* alias expansion, so bombs cost nothing."""

    __slots__ = ("height", "kind", "mark", "size", "src", "value")

    def __init__(self, kind: str, value: Any, mark: Any, size: int = 1, height: int = 0,
                 src: str = ""):
        self.kind, self.value, self.mark, self.src = kind, value, mark, src
        self.size, self.height = size, height  # kind: scalar | seq | map | alias

    @property
    def pos(self) -> tuple[int, int]:
        return self.mark.line + 1, self.mark.column + 1


def _short(tag: str) -> str:
    return "!!" + tag[len(_T):] if tag.startswith(_T) else tag


def _deref(node: _Node) -> _Node:
    return node.value if node.kind == "alias" else node


def _compose(loader: Any, path: str | Path) -> _Node:
    """Build the node tree from events without recursion, enforcing every structural limit."""
    def fail(what: str, mark: Any) -> UserError:
        return UserError(what, file=path, line=mark.line + 1, col=mark.column + 1)

    loader.get_event()  # StreamStart
    if loader.check_event(StreamEndEvent):
        raise UserError("the file is empty; a pipeline starts with 'version: 1'", file=path)
    loader.get_event()  # DocumentStart
    anchors: dict[str, _Node | None] = {}  # None while the anchored node is still open
    anchor_lines: dict[str, int] = {}
    stack: list[list] = []  # [node, pending key node, {key: line}, anchor]
    count = 0
    while True:
        ev = loader.get_event()
        mark = ev.start_mark
        if isinstance(ev, AliasEvent):
            if ev.anchor not in anchors:
                raise fail(f"unknown alias *{ev.anchor}: no anchor &{ev.anchor} before it", mark)
            target = anchors[ev.anchor]
            if target is None:
                raise fail(f"alias *{ev.anchor} refers to a node that contains it", mark)
            node = _Node("alias", target, mark, target.size, target.height)
            count += target.size
            if count > MAX_NODES:
                raise fail(f"too many nodes after expanding aliases (limit {MAX_NODES}): "
                           "an alias bomb?", mark)
            if len(stack) + target.height > MAX_DEPTH:
                raise fail(f"nesting is deeper than {MAX_DEPTH} levels after expanding aliases",
                           mark)
        elif isinstance(ev, (ScalarEvent, SequenceStartEvent, MappingStartEvent)):
            count += 1
            if count > MAX_NODES:
                raise fail(f"too many values (limit {MAX_NODES}); a pipeline file is a few KB",
                           mark)
            if ev.anchor is not None:
                if ev.anchor in anchors:
                    raise fail(f"duplicate anchor &{ev.anchor} (first at line "
                               f"{anchor_lines[ev.anchor]})", mark)
                anchors[ev.anchor], anchor_lines[ev.anchor] = None, mark.line + 1
            is_map = isinstance(ev, MappingStartEvent)
            if isinstance(ev, ScalarEvent):
                value = _scalar(ev, fail)
            elif ev.tag not in (None, "!", _MAP if is_map else _SEQ):
                raise fail(f"tag {_short(ev.tag)} is not allowed; a pipeline file holds "
                           "plain data (strings, numbers, booleans, lists, mappings)", mark)
            if not stack and not is_map:
                if isinstance(ev, ScalarEvent) and ev.value == "" and ev.implicit[0]:
                    raise UserError("the file is empty; a pipeline starts with 'version: 1'",
                                    file=path)
                kind = "a list" if isinstance(ev, SequenceStartEvent) else "a single value"
                raise fail("the top level must be a mapping (a pipeline starts with "
                           f"'version: 1'), not {kind}", mark)
            if isinstance(ev, ScalarEvent):
                node = _Node("scalar", value, mark, src=ev.value)
                if ev.anchor is not None:
                    anchors[ev.anchor] = node
            else:
                if len(stack) + 1 > MAX_DEPTH:
                    raise fail(f"nesting is deeper than {MAX_DEPTH} levels", mark)
                stack.append([_Node("map" if is_map else "seq", [], mark, 1, 1), None, {},
                              ev.anchor])
                continue
        else:  # SequenceEnd / MappingEnd: the open node is complete
            node, _, _, anchor = stack.pop()
            if anchor is not None:
                anchors[anchor] = node
        if not stack:
            break
        _attach(stack[-1], node, fail)
    loader.get_event()  # DocumentEnd (raises on trailing garbage)
    if not loader.check_event(StreamEndEvent):
        raise fail("a second YAML document starts here; a pipeline file holds exactly one",
                   loader.peek_event().start_mark)
    return node


def _scalar(ev: ScalarEvent, fail: Any) -> Any:
    """Resolve with the safe resolver's standard tags; refuse every other tag unconstructed."""
    tag = ev.tag
    if tag is None or tag == "!":
        tag = _RESOLVER.resolve(ScalarNode, ev.value, ev.implicit)
    if tag not in _SCALARS:
        raise fail(f"tag {_short(tag)} is not allowed; a pipeline file holds plain data "
                   "(strings, numbers, booleans, lists, mappings)", ev.start_mark)
    if tag == _MERGE and ev.value == "<<" and ev.implicit[0]:
        return _MergeKey()
    make = _SCALARS[tag]
    if make is str:
        return ev.value
    try:
        return make(ScalarNode(tag, ev.value))
    except (ValueError, KeyError, IndexError):
        raise fail(f"'{ev.value}' is not a valid {_short(tag)}", ev.start_mark) from None


class _MergeKey(str):
    """The plain ``<<`` key: merges a mapping (or a list of them) into the enclosing one."""

    def __new__(cls) -> _MergeKey:
        return super().__new__(cls, "<<")


def _attach(frame: list, node: _Node, fail: Any) -> None:
    """Add a finished child to its open parent; checks keys as they arrive, in file order."""
    parent = frame[0]
    parent.size += node.size
    parent.height = max(parent.height, node.height + 1)
    if parent.kind == "seq":
        parent.value.append(node)
        return
    if frame[1] is None:  # this node is a key
        k = _deref(node)
        if k.kind != "scalar":
            raise fail("mapping keys must be strings, not "
                       f"{'a list' if k.kind == 'seq' else 'a mapping'}", node.mark)
        if not isinstance(k.value, str):
            what = ("this key is empty (null)" if k.src == "" else
                    f"{k.src} reads as {_TYPE_NAMES.get(type(k.value), 'a non-string')} "
                    f"here (quote it: '{k.src}')")
            raise fail(f"mapping keys must be strings; {what}", node.mark)
        if k.value in frame[2]:
            raise fail(f"duplicate key '{k.value}' (first at line {frame[2][k.value]})",
                       node.mark)
        frame[2][k.value] = node.mark.line + 1
        frame[1] = node
        return
    key, frame[1] = frame[1], None
    if isinstance(_deref(key).value, _MergeKey):
        v = _deref(node)
        items = v.value if v.kind == "seq" else [node]  # point at what the user wrote
        for item in items:
            if _deref(item).kind != "map":
                raise fail("'<<' (merge) needs a mapping or a list of mappings", item.mark)
    parent.value.append((key, node))


def _pairs(node: _Node) -> dict[str, tuple[_Node, _Node]]:
    """Effective key -> (key node, value node); explicit keys beat merged, earlier merges win."""
    out: dict[str, tuple[_Node, _Node]] = {}
    for k, v in node.value:
        if isinstance(_deref(k).value, _MergeKey):
            v = _deref(v)
            for src in [v] if v.kind == "map" else [_deref(i) for i in v.value]:
                for name, pair in _pairs(src).items():
                    out.setdefault(name, pair)
    for k, v in node.value:
        if not isinstance(_deref(k).value, _MergeKey):
            out[str(_deref(k).value)] = (k, v)
    return out


def _build(node: _Node, path: tuple, values: dict, keys: dict, words: dict) -> Any:
    """Fresh plain objects (aliases are copied, bounded by MAX_NODES) and a position per path;
    `words` gets the source word of every boolean that YAML 1.2 would read as text."""
    values[path] = node.pos  # an alias's own site; its insides point at the anchor
    node = _deref(node)
    if node.kind == "scalar":  # a stray '<<' value is just text
        if isinstance(node.value, bool) and node.src.lower() not in ("true", "false"):
            words[path] = node.src
        return "<<" if isinstance(node.value, _MergeKey) else node.value
    if node.kind == "seq":
        return [_build(c, path + (i,), values, keys, words) for i, c in enumerate(node.value)]
    out = {}
    for name, (k, v) in _pairs(node).items():
        keys[path + (name,)] = k.pos
        out[name] = _build(v, path + (name,), values, keys, words)
    return out
