"""What a resumed run keeps from its journal: records whose variants and inputs are unchanged, and
the verdict on a variant the run died measuring.

A record is kept when its variant is still planned and the fingerprint of what shaped it (the model
entry, the variant's axes and fixed options, the recipes it names, the latency and verify settings,
the seed) is the one it was measured with, so an edited pipeline re-runs only what the edit touched.

A variant that was being measured when the run died is measured again once (the death may have been
a `kill -9` or a reboot that had nothing to do with it); if the run dies on it again, it is failed
instead of being retried forever, unless `--retry-crashed` asks for another try.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mlbench.records import RunRecord
from mlbench.store.hashing import sha256_json

if TYPE_CHECKING:
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import Variant
    from mlbench.run.journal import JournalContents

CRASHED = ("the run died while measuring it, on {n} attempts; `mlbench run --resume --retry-crashed` "
           "measures it again")


def fingerprint(config: PipelineConfig, variant: Variant) -> str:
    """sha256 of everything in the pipeline that shapes this variant's record."""
    model = next(m for m in config.models if m.name == variant.model)
    values = {value for _, value in variant.axes}
    shaped = {
        "variant": variant.id,
        "model": model.model_dump(mode="json"),
        "axes": [list(axis) for axis in variant.axes],
        "fixed": variant.fixed,
        "recipes": {name: (recipe.model_dump(mode="json") if hasattr(recipe, "model_dump") else recipe)
                    for name, recipe in config.optimizations.items() if name in values},
        "latency": config.latency.model_dump(mode="json"),
        "verify": config.verify.model_dump(mode="json"),
        "seed": config.seed,
    }
    return sha256_json(shaped)


@dataclass
class Resumed:
    kept: dict[str, RunRecord] = field(default_factory=dict)
    crashed: list[RunRecord] = field(default_factory=list)  # failed now: the run died on them again
    changed: int = 0  # journal records dropped because what shaped them changed


def resume(contents: JournalContents, variants: list[Variant], config: PipelineConfig, pipeline_sha256: str,
           *, retry_crashed: bool = False) -> Resumed:
    from mlbench.run.tasks import failed_record

    planned = {v.id: v for v in variants}
    prints = {v.id: fingerprint(config, v) for v in variants}
    same_file = contents.header.get("pipeline_sha256") == pipeline_sha256
    out = Resumed()
    for variant_id, record in contents.records.items():
        if variant_id not in planned:
            continue
        stored = contents.fingerprints.get(variant_id)
        if stored == prints[variant_id] or (stored is None and same_file):  # None: a journal from before fingerprints
            out.kept[variant_id] = record
        else:
            out.changed += 1
    for variant_id, (stored, starts) in contents.unfinished.items():
        if variant_id in out.kept or variant_id not in planned or stored != prints[variant_id]:
            continue
        if starts >= 2 and not retry_crashed:
            out.crashed.append(failed_record(planned[variant_id], "failed", CRASHED.format(n=starts)))
    return out
