"""Localization during a run: for a variant that failed verification or passed within
``verify.localize_within`` times its tolerance, its error localized into the record's details
(``localization``, or ``localization_error`` with the one line it failed with)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlbench.errors import one_line
from mlbench.localization import as_record, needs_localization

if TYPE_CHECKING:
    from mlbench.matrix import Variant
    from mlbench.records import Verification
    from mlbench.sources.loading import LoadedModel

__all__ = ["localize_if_close"]


def localize_if_close(backend: Any, model: LoadedModel, variant: Variant,
                      verification: Verification | None) -> dict[str, Any]:
    """The details to add: none unless the variant is verified, exported by mlbench and close to failing."""
    factor = backend.config.verify.localize_within
    if verification is None or factor is None or backend.target.package is not None or model.spec.generate:
        return {}
    if not needs_localization(verification, factor):
        return {}
    from mlbench.backends.coreml.localize.variant import localize_variant

    try:
        return {"localization": as_record(localize_variant(backend, model, variant))}
    except Exception as exc:  # noqa: BLE001 - localizing is extra: its failure never fails the variant
        return {"localization_error": one_line(f"{type(exc).__name__}: {exc}", limit=300)}
