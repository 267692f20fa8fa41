"""Localization during a run, for every backend that localizes: a variant that failed verification or passed
within ``verify.localize_within`` times its limits gets its error localized into the record's details
(``localization``, or ``localization_error`` with the one line it failed with). Done after the variant's
timing, so it never weighs on a timed figure."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mlbench.errors import one_line
from mlbench.localization import ErrorLocalization, as_record, needs_localization

if TYPE_CHECKING:
    from mlbench.matrix import Variant
    from mlbench.records import Verification
    from mlbench.sources.loading import LoadedModel

__all__ = ["localize_if_close"]


def localize_if_close(backend: Any, model: LoadedModel, variant: Variant, verification: Verification | None,
                      localize: Callable[[Any, Any, Any], ErrorLocalization], *, existing: bool) -> dict[str, Any]:
    """The details to add: none unless the variant is verified, exported by mlbench (not ``existing``), not
    generative, and close to failing."""
    factor = backend.config.verify.localize_within
    if verification is None or factor is None or existing or model.spec.generate is not None:
        return {}
    if not needs_localization(verification, factor):
        return {}
    try:
        return {"localization": as_record(localize(backend, model, variant))}
    except Exception as exc:  # noqa: BLE001 - localizing is extra: its failure never fails the variant
        return {"localization_error": one_line(f"{type(exc).__name__}: {exc}", limit=300)}
