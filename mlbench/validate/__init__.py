"""A pipeline file checked whole: `load_pipeline` is what `mlbench validate`, `plan`, `run`, `compare
--pipeline` and `ab` all call.

Config (`mlbench.config`) defines the file's models and parses one key at a time; what needs the whole
pipeline sits here, above the rooms it consults: include/exclude names and values (`names`), the models'
files, vocabularies and existing artifacts (`models`), the model sources' modules and factories (`sources`),
the matrix (no variant twice, not empty), compare's gate rules, and the report folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlbench.config.base import SHAPE_AXIS, suggest
from mlbench.config.generate import PROMPT_AXIS
from mlbench.config.pipeline import TARGET_MODELS, PipelineConfig
from mlbench.config.pipeline_file import (
    Pipeline,
    PipelineInvalid,
    format_where,
    parse_pipeline,
    report_dir_problem,
)
from mlbench.errors import UserError
from mlbench.validate.models import check_models, sourceless_variants
from mlbench.validate.names import exclude_values, verify_keys
from mlbench.validate.sources import check_sources

__all__ = ["Pipeline", "PipelineInvalid", "load_pipeline", "load_pipeline_text"]


def load_pipeline(path: str | Path) -> Pipeline:
    """Read, check and validate a pipeline file. Raises UserError (PipelineInvalid for many)."""
    from mlbench.config.yaml_positions import load_yaml

    path = Path(path)
    loaded = load_yaml(path)
    pipeline = _validated(loaded, path.resolve())
    _check_report_dir(pipeline, loaded)
    return pipeline


def load_pipeline_text(text: str | bytes, path: str | Path) -> Pipeline:
    """The same for a file's text from elsewhere (e.g. `git show REF:FILE`); `path` names it in messages and
    is where relative paths in it resolve from."""
    from mlbench.config.yaml_positions import load_yaml_text

    return _validated(load_yaml_text(text, path), Path(path), on_disk=False)


def _validated(loaded: Any, path: Path, on_disk: bool = True) -> Pipeline:
    """`on_disk`: the file is where `path` says, so the model files and modules it names can be looked for (not
    so for a file's text at a git ref)."""
    config = parse_pipeline(loaded)
    problems = _check_references(config, loaded, on_disk)
    if problems:
        raise PipelineInvalid(problems)
    return Pipeline(config=config, path=path, sha256=loaded.sha256)


def _check_report_dir(pipeline: Pipeline, loaded: Any) -> None:
    """The report folder must be creatable: checked before any work starts (creates nothing)."""
    why_not = report_dir_problem(pipeline.report_dir)
    if why_not:
        loc: tuple[str | int, ...] = ("report", "dir") if pipeline.config.report.dir is not None else ("name",)
        line, col = loaded.locate(loc) or (None, None)
        raise PipelineInvalid([UserError(why_not, file=loaded.path, line=line, col=col, where=format_where(loc))])


def _check_references(config: PipelineConfig, loaded: Any, on_disk: bool = True) -> list[UserError]:
    """What pydantic can't see: names in include/exclude must exist, and the matrix can't be empty."""
    errors: list[UserError] = []
    model_names = [m.name for m in config.models]

    def error(loc: tuple[str | int, ...], what: str, key: bool = False) -> None:
        line, col = loaded.locate(loc, key=key) or (None, None)
        errors.append(UserError(what, file=loaded.path, line=line, col=col, where=format_where(loc)))

    for section, targets in (("targets", config.targets), ("include", config.include)):
        for i, target in enumerate(targets):
            for loc, what in target.check(config):
                error((section, i, *loc), what)
    for i, include in enumerate(config.include):
        if include.model not in model_names:
            error(("include", i, "model"), f"unknown model '{include.model}'{suggest(include.model, model_names)}")
    base_dir = Path(loaded.path).parent
    sources, keys = check_sources(config, base_dir) if on_disk else ([], [])
    for loc, what in check_models(config, base_dir) + sources:
        error(loc, what)
    for loc, what in keys:
        error(loc, what, key=True)
    for loc, what in verify_keys(config):
        error(loc, what, key=True)
    for loc, what in _gate_problems(config):
        error(loc, what)
    fields = ["model", "backend"] + sorted({a for t in TARGET_MODELS for a in t.axes} | {SHAPE_AXIS, PROMPT_AXIS})
    for i, entry in enumerate(config.exclude):
        if not entry:
            error(("exclude", i), "an empty exclude entry would match every variant")
        for key in entry:
            if key not in fields:
                error(("exclude", i, key), f"unknown variant field '{key}'{suggest(str(key), fields)} "
                      f"(fields: {', '.join(fields)})", key=True)
    for loc, what in exclude_values(config, fields):
        error(loc, what)
    if not errors:
        from mlbench.matrix import VariantConflict, expand

        try:
            variants = expand(config)
        except VariantConflict as exc:
            n = len(config.targets)
            first, second = (("targets", i) if i < n else ("include", i - n)
                             for i in (exc.first_index, exc.second_index))
            error(second, f"gives variant {exc.variant_id} again, with other options than {format_where(first)}; "
                  "a variant id must name one configuration")
            return errors
        for loc, what in sourceless_variants(config, variants):
            error(loc, what)
        if not variants:
            section_loc: tuple[str | int, ...] = ("exclude",) if config.exclude else ("targets",)
            error(section_loc, "the matrix is empty: every variant is excluded", key=True)
    return errors


def _gate_problems(config: PipelineConfig) -> list[tuple[tuple[str | int, ...], str]]:
    """`report.gate` rules compare can parse (their metrics and thresholds)."""
    from mlbench.compare.rules import RuleError, parse_rule

    problems: list[tuple[tuple[str | int, ...], str]] = []
    for i, text in enumerate(config.report.gate):
        try:
            parse_rule(text)
        except RuleError as exc:
            problems.append((("report", "gate", i), str(exc)))
    return problems
