"""A pipeline file as config sees it: the pydantic model validated from YAML with positions, its errors as
one line per problem (`FILE:LINE:COL: where: what`), and the `Pipeline` it becomes. The checks that need
the whole pipeline, the matrix, compare's rules or the registry are `mlbench.validate`'s, one floor up."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from mlbench.config.base import suggest
from mlbench.config.pipeline import PipelineConfig
from mlbench.errors import UserError


class PipelineInvalid(UserError):
    """One or more problems in a pipeline file; each renders as its own one-line error."""

    def __init__(self, errors: list[UserError]) -> None:
        self.errors = errors
        super().__init__(errors[0].what, file=errors[0].file, line=errors[0].line, col=errors[0].col,
                         where=errors[0].where)

    def __str__(self) -> str:
        return "\n".join(UserError.__str__(e) for e in self.errors)


def format_where(loc: tuple[str | int, ...]) -> str:
    """`targets[0].precision[1]` from ("targets", 0, "precision", 1)."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _data_loc(data: Any, loc: tuple[Any, ...]) -> tuple[str | int, ...]:
    """Drop pydantic's extra loc parts (union tags, validator names) by walking the data."""
    clean: list[str | int] = []
    node = data
    for part in loc:
        if (isinstance(node, dict) and part in node) or (isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)):
            node = node[part]
            clean.append(part)
    return tuple(clean)


def _message(error: Any) -> str:
    kind = error["type"]
    ctx = error.get("ctx", {})
    value = error.get("input")
    if kind == "missing":
        return f"missing required key '{error['loc'][-1]}'"
    if kind == "literal_error":
        return f"{value!r} is not allowed; expected {ctx.get('expected', '')}"
    if kind == "union_tag_invalid":
        tags = [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",")]
        prop = str(ctx.get("discriminator", "backend")).strip("'")
        return f"unknown {prop} '{ctx.get('tag')}'{suggest(str(ctx.get('tag')), tags)} ({prop}s: {', '.join(tags)})"
    if kind == "union_tag_not_found":
        return "missing required key 'backend'"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    message = error["msg"]
    if isinstance(value, (str, int, float, bool)) or value is None:
        message += f", got {value!r}"
    return message


def _yaml11_message(error: Any, word: str) -> str | None:
    """A YAML 1.1 boolean (on/off/yes/no) where text was expected: say so, with the fix."""
    if error["type"] == "literal_error":
        return f"'{word}' is not allowed; expected {error.get('ctx', {}).get('expected', '')}"
    if error["type"] == "string_type":
        return f"{word} reads as a boolean here (YAML 1.1); quote it: '{word}'"
    return None


def errors_from_validation(exc: ValidationError, loaded: Any) -> list[UserError]:
    errors: list[UserError] = []
    for error in exc.errors():
        loc = _data_loc(loaded.data, tuple(error["loc"]))
        word = loaded.yaml11_boolean(loc) if isinstance(error.get("input"), bool) else None
        message = (word and _yaml11_message(error, word)) or _message(error)
        as_key = False
        if error["type"] == "unknown_key":
            loc = (*loc, error["ctx"]["key"])
            as_key = True
        elif error["type"] == "union_tag_invalid":  # point at the tag's value, as a schema checker does
            loc = (*loc, str(error["ctx"].get("discriminator", "")).strip("'"))
        position = loaded.locate(loc, key=as_key) or (None, None)
        errors.append(UserError(message, file=loaded.path, line=position[0], col=position[1],
                                where=format_where(loc) or None))
    return errors


def _yaml11_switches(config: PipelineConfig, loaded: Any) -> list[UserError]:
    """`enabled: yes` is true to mlbench (YAML 1.1) but the text "yes" to an editor (YAML 1.2), which
    then flags it; a boolean setting takes true or false, which both read alike."""
    errors = []
    for loc, word in loaded.yaml11_booleans().items():
        node: Any = config
        for part in loc[:-1]:  # down the validated models; free-form values (kwargs) hold no settings
            if isinstance(node, BaseModel) and isinstance(part, str):
                node = getattr(node, part, None)
            elif isinstance(node, dict) and isinstance(part, str):
                node = node.get(part)
            elif isinstance(node, (list, tuple)) and isinstance(part, int) and part < len(node):
                node = node[part]
            else:
                node = None
                break
        if isinstance(node, BaseModel) and loc and loc[-1] in type(node).model_fields:
            line, col = loaded.locate(loc) or (None, None)
            errors.append(UserError(f"write {str(getattr(node, str(loc[-1]))).lower()} instead of {word}: YAML 1.2 "
                                    "(editors, schema checkers) reads it as text", file=loaded.path, line=line,
                                    col=col, where=format_where(loc)))
    return errors


PATH_MAX_BYTES, NAME_MAX_BYTES = 4095, 255


def report_dir_problem(path: Path) -> str | None:
    """Why the report folder could not be created or written, or None; creates nothing."""
    size = len(os.fsencode(str(path)))
    if size > PATH_MAX_BYTES:
        return f"the report folder's path is {size} bytes long; a path holds at most {PATH_MAX_BYTES}"
    for part in path.parts:
        if len(os.fsencode(part)) > NAME_MAX_BYTES:
            return (f"the report folder's path has a name of {len(os.fsencode(part))} bytes ({part[:16]}…); "
                    f"a folder name holds at most {NAME_MAX_BYTES}")
    for folder in (path, *path.parents):
        if not (folder.exists() or folder.is_symlink()):
            continue
        if not folder.is_dir():
            return f"the report folder {path} cannot be created: {folder} is a file"
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"the report folder {path} cannot be {'written' if folder == path else 'created'}: " \
                   f"{folder} is not writable"
        return None
    return None


@dataclass(frozen=True)
class Pipeline:
    """A validated pipeline and the file it came from (relative paths resolve against its folder)."""

    config: PipelineConfig
    path: Path
    sha256: str

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def resolve(self, path: Path) -> Path:
        """A path from the file, taken relative to the file's folder unless absolute."""
        return path if path.is_absolute() else (self.base_dir / path).resolve()

    @property
    def cache_dir(self) -> Path:
        """The pipeline's cache dir, else $MLBENCH_CACHE_DIR, else the platform's user cache dir."""
        from mlbench.store.cache import default_cache_dir

        configured = self.config.cache.dir
        return default_cache_dir() if configured is None else self.resolve(configured)

    @property
    def history_path(self) -> Path:
        """The pipeline's history path, else $MLBENCH_HISTORY, else beside the default cache folder."""
        from mlbench.store.history import default_history_path

        configured = self.config.history.path
        return default_history_path() if configured is None else self.resolve(configured)

    @property
    def report_dir(self) -> Path:
        return self.resolve(self.config.report.dir or Path("reports") / self.config.name)


def parse_pipeline(loaded: Any) -> PipelineConfig:
    """The pipeline model of a loaded YAML file (`yaml_positions.Loaded`), or PipelineInvalid naming every
    place pydantic or YAML 1.1's switch words get wrong."""
    try:
        config = PipelineConfig.model_validate(loaded.data)
    except ValidationError as exc:
        raise PipelineInvalid(errors_from_validation(exc, loaded)) from None
    problems = _yaml11_switches(config, loaded)
    if problems:
        raise PipelineInvalid(problems)
    return config
