"""Which modules to leave uncompressed: those whose compression costs the most output error per byte saved.

Each module's share of the output's error energy was measured by computing only its ops as the variant
does (``programs``); leaving it uncompressed removes about that share, so the output's SNR is expected to
rise by −10·log10(1 − Σ shares). Modules are taken by share per byte saved, largest first, until the
expected SNR clears the floor by ADVICE_MARGIN_DB, or until half the recipe's saving would be given up.
The expectation is an estimate (shares interact); re-running with the override measures it.
"""

from __future__ import annotations

import math

from mlbench.localization import ErrorLocalization, LayerAdvice

__all__ = ["ADVICE_MARGIN_DB", "advise"]

ADVICE_MARGIN_DB = 6.0
"""How far above its SNR floor the advised variant is aimed (the floor itself would leave no margin)."""
_EXCLUDABLE = ("palettize", "linear_quantize", "prune")


def advise(found: ErrorLocalization, weights: dict[str, dict[str, int]], recipe_name: str, recipe: dict | None,
           min_snr_db: float | None, readers: dict[str, list[str]] | None = None) -> LayerAdvice | None:
    """The advice for a compressed variant, or None when there is no recipe to advise on. ``weights``: per
    module, the bytes each of its compressed weights saves (``weights.module_savings``)."""
    from mlbench.backends.coreml.localize.weights import saved_bytes

    if recipe is None or min_snr_db is None:
        return None
    advised = f"{recipe_name}_advised"
    if recipe.get("kind") not in _EXCLUDABLE:
        return LayerAdvice(recipe=recipe_name, advised_recipe=advised, exclude=[], override={},
                           min_snr_db=min_snr_db, reason=f"a {recipe.get('kind')} recipe takes no per-module "
                           "exclusion; give each step's recipe its own exclude")
    savings = {module: saved_bytes(weights, [module]) for module in weights}
    total = saved_bytes(weights)
    snr = found.output_snr_db
    target = min_snr_db + ADVICE_MARGIN_DB
    measured = [m for m in found.modules if m.share is not None and savings.get(_plain(m.module), 0) > 0]
    measured.sort(key=lambda m: -(m.share or 0.0) / savings[_plain(m.module)])
    exclude: list[str] = []
    removed_share = 0.0
    given_up = 0
    expected = snr
    for module in measured:
        if expected is not None and expected >= target:
            break
        if total and saved_bytes(weights, [*exclude, _plain(module.module)]) > total / 2:
            break
        exclude.append(_plain(module.module))
        removed_share += module.share or 0.0
        given_up = saved_bytes(weights, exclude)
        expected = _expected(snr, removed_share)
    entries = [entry for module in exclude for entry in _entries(module, weights, readers or {})]
    override = {**{k: v for k, v in recipe.items() if k != "exclude"},
                "exclude": sorted(set(recipe.get("exclude", [])) | set(entries))}
    kept = (1 - given_up / total) if total else None
    if not exclude:
        reason = (f"the output's SNR {snr:.1f} dB already clears the floor {min_snr_db:g} dB by {ADVICE_MARGIN_DB:g} dB"
                  if snr is not None and snr >= target else
                  "no single module's compression carries enough of the error to exclude within half the saving")
    else:
        reason = (f"{len(exclude)} module(s) carry {removed_share:.0%} of the output's error energy for "
                  f"{given_up / total:.0%} of the saving" if total else "")
    return LayerAdvice(recipe=recipe_name, advised_recipe=advised, exclude=exclude,
                       override={advised: override} if exclude else {}, expected_snr_db=expected if exclude else snr,
                       min_snr_db=min_snr_db, kept_saving=kept, reason=reason)


def _plain(module: str) -> str:
    return "" if module == "(model)" else module


def _entries(module: str, weights: dict[str, dict[str, int]], readers: dict[str, list[str]]) -> list[str]:
    """What `exclude` names for ``module``: its path, unless the path would also take modules under it (or it
    is the model itself): then its own ops' names."""
    plain = _plain(module)
    wider = plain == "" or any(other.startswith(plain + ".") for other in weights)
    return list(readers.get(plain, [])) if wider else [plain]


def _expected(snr: float | None, removed_share: float) -> float | None:
    if snr is None or not math.isfinite(snr):
        return None if snr is None or removed_share < 1.0 else snr
    left = max(1.0 - removed_share, 1e-6)
    return snr - 10 * math.log10(left)
