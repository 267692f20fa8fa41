"""The Core AI figures derived from an asset alone off macOS 27, computed once and cached beside it
(`mlbench.backends.cached_figures`):

- the reference verification (Core AI's bundled CPU runtime on the input set, compared with eager PyTorch's):
  once per asset, function, input set, reference outputs, tolerance and Core AI version; compute units never
  change what the asset computes. What the reference runtime's process left beside its results (its time per
  call, its memory) is kept with them, from the run that computed them;
- the estimated placement and latency: once per asset, function, compute units, chips and version of the rules;
- a generative asset's reference generation check (the reference runtime's prefill and decode steps over
  eager's tokens, judged against eager's greedy generation): once per asset, prompt length, new tokens, eager's
  generation, tolerance and Core AI version; its prefill/decode estimates and placement once per asset, compute
  units, prompt length, new tokens and chips.
"""

from __future__ import annotations

from pathlib import Path
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
    from mlbench.backends.base import Exported
    from mlbench.matrix import Variant
    from mlbench.records import Verification
    from mlbench.sources.loading import LoadedModel

REFERENCE = "coreai.reference_verify"
ESTIMATES = "coreai.estimates"
GENERATION = "coreai.reference_generation"
GENERATION_ESTIMATES = "coreai.generation_estimates"


def reference_version() -> str:
    """The version of what computes a reference verification: Core AI's packages, the runner, the comparison."""
    packages = "/".join(f"{name} {package_version(name)}" for name in ("coreai-core", "coreai-torch", "numpy"))
    return f"{packages}/" + code_version("mlbench.backends.coreai.reference", "mlbench.backends.coreai.reference_child",
                                         "mlbench.verify")


def reference(backend: Any, exported: Exported, model: LoadedModel, variant: Variant
              ) -> tuple[Verification | None, str | None, dict[str, Any]]:
    """`Any._reference`'s (verification, why not, details), computed once per asset and input set."""
    path = Path(exported.payload[0])

    def compute() -> DerivedFigures:
        verification, why_not, details = backend._reference(path, model, variant)
        return DerivedFigures(verification=verification, why_not=why_not, details=details)

    if not model.has_source:
        figures = compute()
        return figures.verification, figures.why_not, dict(figures.details)
    verify = backend.config.verify
    precision, recipe = variant.axis("precision"), variant.axis("optimize")
    alternative = model.alternative(variant.shape)
    inputs: list[tuple[str, Any]] = []
    references: list[tuple[str, Any]] = []
    for index in range(verify.samples):
        sample, outputs = model.sample(index, alternative)
        inputs.extend((f"{index}.{name}", tensor) for name, tensor in zip(model.input_names, sample))
        references.extend((f"{index}.{name}", value) for name, value in outputs)
    parts = {"function": backend._function(model, variant), "inputs": digest_arrays(inputs),
             "reference": digest_arrays(references), "tolerance": verify.tolerance_for(precision, recipe),
             "min_snr_db": verify.min_snr_db_for(precision, recipe), "code": reference_version()}
    figures = cached_figures(backend.cache, exported.info, REFERENCE, parts, compute, work="reference-run",
                             label=variant.artifact_id)
    return figures.verification, figures.why_not, dict(figures.details)


def estimates(backend: Any, exported: Exported, variant: Variant, function: str) -> DerivedFigures:
    """`Any._estimates`' placement, metrics and details, once per asset, function, compute units and
    chips."""
    path = Path(exported.payload[0])

    def compute() -> DerivedFigures:
        metrics: dict[str, Any] = {}
        placement, details = backend._estimates(path, variant, metrics, function)
        return DerivedFigures(metrics=metrics, placement=placement, details=details)

    parts = {"function": function, "compute_units": variant.axis("compute_units"),
             "estimate_on": list(backend.target.estimate_on),
             "code": code_version("mlbench.backends.apple", "mlbench.backends.coreai.estimate",
                                  "mlbench.backends.coreai.ir", type(backend).__module__)}
    return cached_figures(backend.cache, exported.info, ESTIMATES, parts, compute, work="estimated",
                          label=f"{variant.artifact_id} on {variant.axis('compute_units')}")


def reference_generation(backend: Any, exported: Exported, model: LoadedModel, variant: Variant
                         ) -> tuple[Verification, dict[str, Any]]:
    """`generate.check_generation`'s (verification, the runs' details), computed once per asset, prompt length,
    new tokens, eager's generation and tolerance: the compute-unit variants of one asset share it."""
    from mlbench.backends.coreai.generate import check_generation
    from mlbench.generate.reference import eager_generation

    path = Path(exported.payload[0])
    config = backend.config

    def compute() -> DerivedFigures:
        verification, details = check_generation(path, model, variant, config)
        return DerivedFigures(verification=verification, details=details)

    generate = model.spec.generate
    assert generate is not None and variant.prompt is not None
    precision, recipe = variant.axis("precision"), variant.axis("optimize")
    parts = {"prompt": variant.prompt, "new_tokens": generate.new_tokens,
             "reference": digest_generation(eager_generation(model, variant.prompt)),
             "tolerance": config.verify.tolerance_for(precision, recipe),
             "min_snr_db": config.verify.min_snr_db_for(precision, recipe),
             "code": reference_version() + "/" + code_version("mlbench.backends.coreai.generate", "mlbench.generate")}
    figures = cached_figures(backend.cache, exported.info, GENERATION, parts, compute, work="reference-run",
                             label=f"{variant.artifact_id} at prompt {variant.prompt}")
    assert figures.verification is not None
    return figures.verification, dict(figures.details)


def generation_estimates(backend: Any, exported: Exported, model: LoadedModel, variant: Variant) -> DerivedFigures:
    """`generate_estimate.estimate_generation`'s estimates (metrics), their parts (details) and the decode
    function's placement, once per asset, compute units, prompt length, new tokens and chips."""
    from mlbench.backends.coreai.generate_estimate import estimate_generation

    path = Path(exported.payload[0])
    chips = list(backend.target.estimate_on)

    def compute() -> DerivedFigures:
        metrics, parts, placement = estimate_generation(path, model, variant, chips)
        return DerivedFigures(metrics=metrics, placement=placement, details=parts)

    generate = model.spec.generate
    assert generate is not None
    compute_units = variant.axis("compute_units")
    parts = {"compute_units": compute_units, "prompt": variant.prompt, "new_tokens": generate.new_tokens,
             "estimate_on": chips,
             "code": code_version("mlbench.backends.apple", "mlbench.backends.coreai.estimate",
                                  "mlbench.backends.coreai.ir", "mlbench.backends.coreai.generate_estimate")}
    return cached_figures(backend.cache, exported.info, GENERATION_ESTIMATES, parts, compute, work="estimated",
                          label=f"{variant.artifact_id} on {compute_units} at prompt {variant.prompt}")
