"""Localization during a run, for every backend that localizes: a variant that failed verification or passed
within ``verify.localize_within`` times its limits gets its error localized into the record's details
(``localization``, or ``localization_error`` with the one line it failed with). Done after the variant's
timing, so it never weighs on a timed figure.

A localization is a derived figure (`cached_figures`): computed once per variant and everything its result
depends on, kept in the artifact cache, and found there by a warm rerun or `mlbench explain`. Found, it says
so (``cached``) and keeps the ``seconds`` it took when it was computed. A localization that failed is not
kept: its failure may be this machine's or this moment's (a runtime missing, memory, a reference that could
not be exported), so the next run tries again.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mlbench.errors import one_line
from mlbench.localization import ErrorLocalization, as_record, needs_localization

if TYPE_CHECKING:
    from mlbench.matrix import Variant
    from mlbench.records import ArtifactInfo, Verification
    from mlbench.sources.loading import LoadedModel

__all__ = ["LOCALIZED", "cached_localization", "localization_parts", "localize_if_close"]

LOCALIZED = "localized"
"""What the run's work summary calls it (`0 localized (1 cached)`)."""

Localize = Callable[[Any, Any, Any], ErrorLocalization]


def localize_if_close(backend: Any, model: LoadedModel, variant: Variant, verification: Verification | None,
                      localize: Localize, *, existing: bool, info: ArtifactInfo | None = None) -> dict[str, Any]:
    """The details to add: none unless the variant is verified, exported by mlbench (not ``existing``), not
    generative, and close to failing. `info` is the variant's artifact, when the caller has it."""
    factor = backend.config.verify.localize_within
    if verification is None or factor is None or existing or model.spec.generate is not None:
        return {}
    if not needs_localization(verification, factor):
        return {}
    try:
        return {"localization": as_record(cached_localization(backend, model, variant, localize, info=info))}
    except Exception as exc:  # noqa: BLE001 - localizing is extra: its failure never fails the variant
        return {"localization_error": one_line(f"{type(exc).__name__}: {exc}", limit=300)}


def cached_localization(backend: Any, model: LoadedModel, variant: Variant, localize: Localize, *,
                        info: ArtifactInfo | None = None) -> ErrorLocalization:
    """`localize(backend, model, variant)`, computed once for what `localization_parts` names and cached
    beside the variant's artifact; computed every time where there is no key (a model without a source, an
    artifact or reference outside the cache). Raises what `localize` raises (nothing is cached then)."""
    from mlbench.backends.cached_figures import DerivedFigures, cached_figures

    computed: list[ErrorLocalization] = []

    def compute() -> DerivedFigures:
        computed.append(localize(backend, model, variant))
        return DerivedFigures(details={"localization": as_record(computed[-1])})

    parts = localization_parts(backend, model, variant)
    if parts is None:
        return localize(backend, model, variant)
    if info is None:
        info = backend.export(model, variant).info
    figures = cached_figures(backend.cache, info, f"{backend.name}.localization", parts, compute, work=LOCALIZED,
                             label=variant.id)
    if computed:
        return computed[-1]
    return ErrorLocalization.model_validate(figures.details["localization"]).model_copy(update={"cached": True})


def localization_parts(backend: Any, model: LoadedModel, variant: Variant) -> dict[str, Any] | None:
    """What a localization depends on beyond the variant's artifact (key and checksum, which `cached_figures`
    adds): the variant's id (its labels name it), the reference (the same model's float32 artifact, by key and
    checksum; or the model itself where the backend's reference is its program before lowering), the model's
    digest (the module outputs are compared with eager PyTorch), the input sets, the limits and recipe the
    advice reads, this machine's OS and architecture, the packages that compute it and the version of
    mlbench's code. None when there is no such key."""
    from mlbench.backends.cached_figures import artifact_checksum, code_version, digest_arrays
    from mlbench.config.base import NO_OPTIMIZATION
    from mlbench.machine import package_version
    from mlbench.plugins.registry import get

    if not model.has_source:
        return None
    axes = dict(variant.axes)
    reference_axes = tuple((k, "float32" if k == "precision" else NO_OPTIMIZATION if k == "optimize" else v)
                           for k, v in variant.axes)
    reference: Any = "itself"
    if reference_axes != variant.axes:
        if backend.localizes_against_export:
            import dataclasses

            ref_info = backend.export(model, dataclasses.replace(variant, axes=reference_axes)).info
            checksum = artifact_checksum(backend.cache, ref_info)
            if ref_info is None or checksum is None:
                return None
            reference = {"artifact": ref_info.key, "checksum": checksum}
        else:
            reference = "the model's program"  # the model's own digest below
    verify = backend.config.verify
    precision, recipe = variant.axis("precision"), axes.get("optimize", NO_OPTIMIZATION)
    alternative = model.alternative(variant.shape)
    inputs = [(f"{i}.{n}", value) for i in range(verify.samples)
              for n, value in enumerate(model.sample(i, alternative)[0])]
    optimization = backend.config.optimizations.get(recipe) if recipe != NO_OPTIMIZATION else None
    packages = ("numpy", "torch", *get(backend.name).packages)
    return {"variant": variant.id, "reference": reference, "model": model.digest, "inputs": digest_arrays(inputs),
            "tolerance": verify.tolerance_for(precision, recipe), "min_snr_db": verify.min_snr_db_for(precision, recipe),
            "recipe": optimization.model_dump(mode="json") if optimization is not None else None,
            "machine": f"{sys.platform} {platform.machine()}",
            "packages": {name: package_version(name) for name in packages},
            "code": code_version("mlbench.localization", "mlbench.backends.localize_graph",
                                 "mlbench.backends.localize_hook", "mlbench.backends.eager_modules",
                                 "mlbench.backends.source_frames", "mlbench.sources", type(backend).__module__
                                 .rsplit(".", 1)[0])}
