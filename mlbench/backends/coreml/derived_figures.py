"""The Core ML figures derived from a package alone, computed once and cached beside it
(`mlbench.backends.cached_figures`):

- the emulated verification (the interpreter's outputs on the input set, compared with eager PyTorch's): once
  per package, input set, reference outputs, tolerance and interpreter version; compute units never change
  what a program computes, so the four compute-unit variants of one package share it;
- the estimated memory: once per package;
- off macOS, the estimated placement and latency: once per package, compute units, chips (and their profiles
  and calibration) and version of the rules;
- a generative export's emulated generation check (token agreement, logits error against eager's greedy
  generation): once per export, prompt length, new tokens, eager's generation, tolerance and interpreter
  version; off macOS, its functions' placements and prefill/decode estimates: once per export, compute units,
  prompt length, new tokens and chips.

The versions are digests of the code that computes each (`code_version`): editing a kernel, a rule or a chip
table computes the figures again; nothing else does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlbench.backends.cached_figures import (
    DerivedFigures,
    cached_figures,
    code_version,
    digest_arrays,
    digest_generation,
)
from mlbench.machine import package_version

if TYPE_CHECKING:
    from collections.abc import Callable

    from mlbench.backends.base import Exported
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import Variant
    from mlbench.records import Verification
    from mlbench.sources.loading import LoadedModel
    from mlbench.store.cache import ArtifactCache

EMULATED = "coreml.emulated_verify"
ESTIMATES = "coreml.estimates"
MEMORY = "coreml.memory_estimate"
GENERATION = "coreml.emulated_generation"
GENERATION_ESTIMATES = "coreml.generation_estimates"


def emulator_version() -> str:
    """The version of what computes an emulated verification: the interpreter, the comparison, numpy."""
    return f"numpy {package_version('numpy')}/" + code_version(
        "mlbench.backends.coreml.emulate", "mlbench.backends.coreml.emulated_verify", "mlbench.verify",
        "mlbench.overflow", "mlbench.sources.inputs", "mlbench.sources.float64")


def rules_version() -> str:
    """The version of what computes placement, latency and memory estimates: the Apple-silicon model (rules,
    cost, chips, calibration fit) and the Core ML backend's use of it."""
    return code_version("mlbench.backends.apple", "mlbench.backends.coreml.backend",
                        "mlbench.backends.coreml.memory_estimate", "mlbench.backends.coreml.flexible_memory")


def emulated(cache: ArtifactCache, config: PipelineConfig, exported: Exported, model: LoadedModel, variant: Variant
             ) -> tuple[Verification | None, str | None]:
    """(verification, None) or (None, why not), as `emulated_verification` gives them, computed once per
    package and input set."""
    from mlbench.backends.coreml.emulated_verify import emulated_verification, package_feeds

    artifact = exported.payload
    verify = config.verify
    precision, recipe = variant.axis("precision"), variant.axis("optimize")
    alternative = model.alternative(variant.shape)
    tolerance, min_snr_db = verify.tolerance_for(precision, recipe), verify.min_snr_db_for(precision, recipe)

    def compute() -> DerivedFigures:
        verification, why_not = emulated_verification(artifact, model, samples=verify.samples,
                                                       alternative=alternative, tolerance=tolerance,
                                                       min_snr_db=min_snr_db, float32=precision == "float32")
        return DerivedFigures(verification=verification, why_not=why_not)

    if not model.has_source:
        figures = compute()
        return figures.verification, figures.why_not
    inputs: list[tuple[str, Any]] = []
    references: list[tuple[str, Any]] = []
    for index in range(verify.samples):
        sample, reference = model.sample(index, alternative)
        inputs.extend((f"{index}.{name}", value) for name, value in package_feeds(model, sample).items())
        references.extend((f"{index}.{name}", value) for name, value in reference)
    parts = {"inputs": digest_arrays(inputs), "reference": digest_arrays(references), "tolerance": tolerance,
             "min_snr_db": min_snr_db, "float32_floor_capped": precision == "float32", "code": emulator_version()}
    figures = cached_figures(cache, exported.info, EMULATED, parts, compute, work="emulated",
                             label=variant.artifact_id)
    return figures.verification, figures.why_not


def memory(cache: ArtifactCache, exported: Exported, variant: Variant) -> tuple[dict[str, Any], dict[str, Any]]:
    """(`memory.estimated` metrics, their details), once per package."""
    from mlbench.backends.coreml.memory_estimate import memory_metrics

    artifact = exported.payload

    def compute() -> DerivedFigures:
        metrics, details = memory_metrics(artifact.package, artifact.analysis)
        return DerivedFigures(metrics=metrics, details=details)

    figures = cached_figures(cache, exported.info, MEMORY, {"code": rules_version()}, compute,
                             work="estimated", label=variant.artifact_id)
    return dict(figures.metrics), figures.details


def estimates(cache: ArtifactCache, exported: Exported, variant: Variant, settings: dict[str, Any],
              compute: Callable[[], DerivedFigures]) -> DerivedFigures:
    """Off macOS: the estimated placement at the variant's compute units, its metrics and the latency estimates
    (`compute()`: `placement`, `metrics`, `details`), once per package, compute units and the estimate's
    `settings` (the chips, their profiles and calibration, this machine's chip)."""
    compute_units = variant.axis("compute_units")
    parts = {"compute_units": compute_units, **settings, "code": rules_version()}
    return cached_figures(cache, exported.info, ESTIMATES, parts, compute, work="estimated",
                          label=f"{variant.artifact_id} on {compute_units}")


def generation_version() -> str:
    """The version of what computes an emulated generation check: the interpreter and comparison
    (`emulator_version`), the stateful generator and mlbench's generation code (eager's, the metrics)."""
    return emulator_version() + "/" + code_version("mlbench.backends.coreml.generate.run", "mlbench.generate")


def emulated_generation(cache: ArtifactCache, config: PipelineConfig, exported: Exported, model: LoadedModel,
                        variant: Variant) -> tuple[Verification | None, str | None]:
    """`generate.run.emulated_generation`'s (verification, why not), computed once per generative export, prompt
    length, new tokens, eager's generation and tolerance: the compute-unit variants of one export share it."""
    from mlbench.backends.coreml.generate.run import emulated_generation as emulate
    from mlbench.backends.coreml.generate.run import judged_as
    from mlbench.generate.reference import eager_generation

    folder = exported.payload.folder

    def compute() -> DerivedFigures:
        verification, why_not = emulate(folder, model, variant, config)
        return DerivedFigures(verification=verification, why_not=why_not)

    generate = model.spec.generate
    if not model.has_source or generate is None or variant.prompt is None:
        figures = compute()
        return figures.verification, figures.why_not
    tolerance, floor = judged_as(config, variant.axis("precision"), variant.axis("optimize"))
    parts = {"prompt": variant.prompt, "new_tokens": generate.new_tokens,
             "reference": digest_generation(eager_generation(model, variant.prompt)), "tolerance": tolerance,
             "min_snr_db": floor, "code": generation_version()}
    figures = cached_figures(cache, exported.info, GENERATION, parts, compute, work="emulated",
                             label=f"{variant.artifact_id} at prompt {variant.prompt}")
    return figures.verification, figures.why_not


def generation_estimates(cache: ArtifactCache, exported: Exported, variant: Variant, settings: dict[str, Any],
                         compute: Callable[[], DerivedFigures]) -> DerivedFigures:
    """Off macOS: a generative export's placements and prefill/decode estimates (`compute()`), once per export,
    compute units, prompt length, new tokens and the estimate's `settings` (the chips and their profiles)."""
    compute_units = variant.axis("compute_units")
    parts = {"compute_units": compute_units, "prompt": variant.prompt, **settings,
             "code": code_version("mlbench.backends.coreml.generate.backend") + "/" + rules_version()}
    return cached_figures(cache, exported.info, GENERATION_ESTIMATES, parts, compute, work="estimated",
                          label=f"{variant.artifact_id} on {compute_units} at prompt {variant.prompt}")
