"""Before a run starts: can anything in it run on this machine? A variant needs its backend's packages
(`BackendSpec.requires`) and, when its model has a source, what builds the model (torch; torchvision or
transformers for those sources). When no variant has what it needs, the run stops before it writes anything
(no journal, no report over the previous one, no history entry), naming the extra to install in one line.
A run where only some variants lack a package goes ahead: those are skipped, each saying why.

Packages are looked for with `find_spec`, which imports nothing.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from mlbench.errors import UserError

if TYPE_CHECKING:
    from mlbench.config.pipeline_file import Pipeline
    from mlbench.matrix import Variant

DISTRIBUTION = "mlbench-ondevice"
SOURCE_NEEDS = {"torchvision": (("torchvision", "torchvision"), "torch"),
                "transformers": (("transformers", "transformers"), "transformers")}
"""What a model source of that kind needs beyond torch, and the extra that brings it."""


class NothingCanRun(UserError):
    """Every variant lacks a package this machine does not have."""


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails, or a module whose spec is unset
        return False


def missing_for(pipeline: Pipeline, variant: Variant) -> list[tuple[str, str]]:
    """(distribution, extra) pairs this variant lacks; [] when it can run as far as packages go."""
    from mlbench.plugins.registry import specs

    spec = specs()[variant.backend]
    model = next(m for m in pipeline.config.models if m.name == variant.model)
    target = [*pipeline.config.targets, *pipeline.config.include][variant.target_index]
    needs: list[tuple[tuple[str, str], str]] = [(pair, spec.extra or spec.name) for pair in spec.requires]
    if model.source is not None and not target.uses_existing_artifact():
        needs.append((("torch", "torch"), "torch"))
        if model.source_kind in SOURCE_NEEDS:
            pair, extra = SOURCE_NEEDS[model.source_kind]
            needs.append((pair, extra))
    missing: list[tuple[str, str]] = []
    for (module, distribution), extra in needs:
        if not installed(module) and (distribution, extra) not in missing:
            missing.append((distribution, extra))
    return missing


def install_line(missing: list[tuple[str, str]]) -> str:
    """`pip install "mlbench-ondevice[coreml]"`: every extra's own extra brings torch, so `torch` is named only
    when no other extra is."""
    extras = list(dict.fromkeys(extra for _, extra in missing))
    if len(extras) > 1 and "torch" in extras:
        extras.remove("torch")
    return f'pip install "{DISTRIBUTION}[{",".join(extras)}]"'


def check_runnable(pipeline: Pipeline, variants: list[Variant]) -> None:
    """NothingCanRun (one line, exit 2) when no variant has the packages it needs."""
    if not variants:
        return
    found: list[tuple[str, str]] = []
    for variant in variants:
        missing = missing_for(pipeline, variant)
        if not missing:
            return
        found.extend(pair for pair in missing if pair not in found)
    names = list(dict.fromkeys(distribution for distribution, _ in found))
    verb = "is" if len(names) == 1 else "are"
    raise NothingCanRun(f"no variant can run on this machine: {' and '.join(names)} {verb} not installed; "
                        f"{install_line(found)}", file=pipeline.path)
