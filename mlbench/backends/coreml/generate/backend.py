"""The Core ML backend's generative path: a model with a `generate:` block exports once per precision and
recipe (`generate_export`: the cache as state, prefill and decode functions) and is measured at each prompt
length (the `prompt` axis does not reach the cache key, so one export serves every prompt length).

Everywhere: each function analysed and placed (decode's placement is the variant's; prefill's in details),
`memory.kv_cache` from the declared state shapes, `latency.estimated.prefill.<chip>` /
`latency.estimated.decode.<chip>` (`generate_estimate`), the generation emulated and verified against eager
(`generate_run`). On macOS, prefill and decode timed through `MLState`; elsewhere they are absent with the
reason.

The emulated generation, and off macOS the placements and estimates, are derived from the export alone and
cached beside it (`derived_figures`): the compute-unit variants of one export emulate once, a warm rerun not
at all.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.backends.base import Exported, Measurement
from mlbench.backends.cached_figures import DerivedFigures
from mlbench.generate.metrics import DECODE, PREFILL, generative_metrics, verification_metrics
from mlbench.records import Metric

if TYPE_CHECKING:
    from mlbench.backends.apple.analysis import ProgramAnalysis
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel

__all__ = ["CoremlGeneration", "export_generative", "kv_cache_bytes", "measure_generative"]

GENERATION_FOLDER = "generation"
STATE_BYTES = {"fp16": 2, "fp32": 4}


@dataclass
class CoremlGeneration:
    """A generative export in the cache: its folder, each function's analysis, the layout and the states."""

    folder: Path
    analyses: dict[str, ProgramAnalysis]
    layout: str
    layout_reason: str | None
    state_shapes: dict[str, list[int]]
    state_dtype: str
    head_dim: int


def kv_cache_bytes(state_shapes: dict[str, list[int]], state_dtype: str) -> int:
    """Bytes of every state (the key and the value cache) at full context, from the declared shapes."""
    total = 0
    for shape in state_shapes.values():
        count = 1
        for d in shape:
            count *= d
        total += count * STATE_BYTES[state_dtype]
    return total


def export_generative(backend: Any, model: LoadedModel, variant: Variant,
                      artifact_key_inputs: Callable[..., dict]) -> Exported:
    """The cached stateful export (`artifact_key_inputs`: the backend's key of a package, the generation's
    own facts added), each function analysed."""
    from mlbench.backends.apple.analysis import analyse_package
    from mlbench.backends.cached_export import build_cached
    from mlbench.backends.coreml.generate.export import FUNCTIONS, GENERATE_FORMAT, export_generation, function_packages
    from mlbench.backends.coreml.target import recipe_dict
    from mlbench.generate.eager import causal_lm
    from mlbench.generate.kv_module import cache_shape
    from mlbench.machine import package_version

    generate = model.spec.generate
    assert generate is not None
    precision = variant.axis("precision")
    recipe = recipe_dict(backend.config.optimizations.get(variant.axis("optimize")), backend.config.optimizations)
    lm = causal_lm(model.torch_module, model.spec.name)
    key = artifact_key_inputs(model, precision, recipe, "iOS18")
    key["generate"] = {"format": GENERATE_FORMAT, "context": generate.context,
                       "transformers": package_version("transformers")}

    def export(folder: Path) -> Any:
        return export_generation(lm, context=generate.context, precision=precision, optimization=recipe,
                                 dest=folder / GENERATION_FOLDER)

    def own_facts(result: Any) -> dict[str, Any]:
        return {"layout": result.layout, "layout_reason": result.layout_reason, "state_shapes": result.state_shapes,
                "state_dtype": result.state_dtype, "context": result.context, "deployment_target": "iOS18"}

    cached = build_cached(backend.cache, key, export, label=variant.artifact_id, own_facts=own_facts)
    packages = function_packages(cached.path)
    analyses = {name: analyse_package(package, function if function != "main" else None)
                for name, (package, function) in packages.items()}
    payload = CoremlGeneration(cached.path, analyses, cached.meta.get("layout", ""), cached.meta.get("layout_reason"),
                               cached.meta.get("state_shapes", {}), cached.meta.get("state_dtype", "fp16"),
                               cache_shape(lm.config, generate.context).head_dim)
    details = {"export": cached.facts("deployment_target", "layout", "layout_reason", "state_shapes", "state_dtype",
                                      "warnings"),
               "functions": {name: analyses[name].model_dump(mode="json") for name in FUNCTIONS}}
    return Exported(payload=payload, info=cached.info, details=details)


def measure_generative(backend: Any, model: LoadedModel, exported: Exported, variant: Variant, *,
                       placement_for: Callable[..., Any], static_metrics: Callable[..., dict[str, Metric]],
                       not_macos: str) -> Measurement:
    """The variant's figures (module docstring); the backend lends its placement, static metrics and the reason
    Core ML does not run here."""
    from mlbench.backends.coreml import derived_figures as derived
    from mlbench.backends.coreml.generate.run import STATE_PRECISION_NOTE

    generation: CoremlGeneration = exported.payload
    generate = model.spec.generate
    assert generate is not None and variant.prompt is not None
    kv_bytes = kv_cache_bytes(generation.state_shapes, generation.state_dtype)
    metrics = static_metrics(generation.analyses["decode"])
    metrics["size.package"] = Metric.measured(_folder_bytes(generation.folder), "bytes")

    def placed() -> DerivedFigures:
        return _placed_and_estimated(backend, generation, variant, generate.new_tokens, placement_for)

    if sys.platform != "darwin":  # estimated by the rules alone: once per export, compute units and prompt
        settings = {"new_tokens": generate.new_tokens, "estimate_on": list(backend.target.estimate_on),
                    "chip_profiles": {k: v.model_dump(mode="json") for k, v in backend.target.chip_profiles.items()}}
        figures = derived.generation_estimates(backend.cache, exported, variant, settings, placed)
    else:  # pragma: no cover - macOS: the placements come from this machine's compute plans
        figures = placed()
    assert figures.placement is not None
    metrics.update(figures.metrics)
    details: dict[str, Any] = {
        "layout": generation.layout if not generation.layout_reason else f"{generation.layout}: {generation.layout_reason}",
        **figures.details,
        "kv_cache": f"declared state shapes {generation.state_shapes} in {generation.state_dtype}"}
    if variant.axis("precision") == "float32":
        details["verify_tolerance"] = STATE_PRECISION_NOTE
    # once per export, prompt length and eager's generation: compute units never change what is computed
    emulated, why_not = derived.emulated_generation(backend.cache, backend.config, exported, model, variant)
    if sys.platform != "darwin":
        reason = not_macos
        metrics.update(generative_metrics(kv_cache_bytes=kv_bytes, absent={PREFILL: reason, DECODE: reason}))
        if emulated is not None:
            metrics.update(verification_metrics(emulated))
        else:
            metrics.update(generative_metrics(absent={"verify.token_agreement": f"{why_not}",
                                                      "verify.logits_max_rel": f"{why_not}"}))
        return Measurement(metrics=metrics, placement=figures.placement, verify=emulated, details=details)
    from mlbench.backends.coreml.generate.run import measure_generation  # pragma: no cover - macOS only

    result = measure_generation(generation.folder, model, variant, backend.config, kv_bytes)  # pragma: no cover
    result.metrics = {**metrics, **result.metrics}  # pragma: no cover
    if emulated is not None:  # pragma: no cover - beside the measured verification, as for other variants
        result.details["verify_emulated"] = emulated.model_dump(mode="json")
    result.placement = figures.placement  # pragma: no cover
    result.details.update(details)  # pragma: no cover
    return result  # pragma: no cover


def _placed_and_estimated(backend: Any, generation: CoremlGeneration, variant: Variant, new_tokens: int,
                          placement_for: Callable[..., Any]) -> DerivedFigures:
    """Each function placed at the variant's compute units (decode's is the variant's placement; prefill's in
    details) and, for the target's chips, prefill and decode estimated at the variant's prompt length."""
    from mlbench.backends.base import placement_metrics
    from mlbench.backends.coreml.artifact import CoremlArtifact

    assert variant.prompt is not None
    compute_units = variant.axis("compute_units")
    placements = {name: placement_for(CoremlArtifact(Path(analysis.path), analysis), compute_units)
                  for name, analysis in generation.analyses.items()}
    metrics = placement_metrics(placements["decode"])
    details: dict[str, Any] = {"placement_prefill": placements["prefill"].model_dump(mode="json")}
    if backend.target.estimate_on:
        from mlbench.backends.apple.generate_estimate import generation_estimates

        functions = {name: (generation.analyses[name], placements[name]) for name in ("prefill", "decode")}
        estimates, parts = generation_estimates(functions, list(backend.target.estimate_on), prompt=variant.prompt,
                                                new_tokens=new_tokens, head_dim=generation.head_dim,
                                                own_profiles=dict(backend.target.chip_profiles))
        metrics.update(estimates)
        details["latency_estimate"] = parts
    return DerivedFigures(metrics=metrics, placement=placements["decode"], details=details)


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and "compiled" not in p.parts)
