"""One report column's error bands in words: each shared clause once (no torch)."""

from mlbench.records import Band
from mlbench.report.band_words import basis_clauses, describe_bands

CHIP = "uncalibrated chip (x): costs carry from a16 (scaled; by peaks)"
LOCO = "band: leave-one-chip-out over a14, a16 (each chip's rows predicted by a fit without them)"
OVER = "an estimate at least 50% fixed and per-op cost takes the band of the 7 rows whose estimate was so"
UNDER = "an estimate under 50% fixed and per-op cost takes the band of the 53 rows whose estimate was so"
WIDER = "and, wider where it is, palettized variant: the compressed rows (×1.32 typical, ×1.69 worst)"


def band(median: float, worst: float, *clauses: str) -> Band:
    return Band(median_ratio=median, worst_ratio=worst, basis="; ".join(clauses))


def test_a_basis_splits_at_semicolons_outside_parentheses_only():
    assert basis_clauses(f"{CHIP}; {LOCO}; calibrated 2026-12-05") == [CHIP, LOCO, "calibrated 2026-12-05"]
    assert basis_clauses("9 rows") == ["9 rows"]


def test_one_band_is_said_whole():
    assert describe_bands([band(1.2, 2.0, "9 rows")]) == "off by ×1.20 typically, ×2.00 at worst (9 rows)"
    assert describe_bands([]) == ""


def test_several_bands_say_their_own_clauses_then_what_they_share_once():
    text = describe_bands([band(2.45, 2.66, CHIP, LOCO, "calibrated 2026-12-05", OVER),
                           band(2.45, 2.66, CHIP, LOCO, "calibrated 2026-12-05", OVER, WIDER),
                           band(1.14, 1.96, CHIP, LOCO, "calibrated 2026-12-05", UNDER)])
    assert text == (f"off by ×2.45 typically, ×2.66 at worst ({OVER}); "
                    f"off by ×2.45 typically, ×2.66 at worst ({OVER}; {WIDER}); "
                    f"off by ×1.14 typically, ×1.96 at worst ({UNDER}); "
                    f"each band: {CHIP}; {LOCO}; calibrated 2026-12-05")
    assert text.count(CHIP) == 1 and text.count(LOCO) == 1


def test_a_band_with_no_clause_of_its_own_gives_its_figures_alone():
    text = describe_bands([band(1.14, 1.96, CHIP, "calibrated 2026-12-05"),
                           band(1.32, 1.96, CHIP, "calibrated 2026-12-05", WIDER)])
    assert text == (f"off by ×1.14 typically, ×1.96 at worst; off by ×1.32 typically, ×1.96 at worst ({WIDER}); "
                    f"each band: {CHIP}; calibrated 2026-12-05")


def test_bands_sharing_nothing_are_each_said_whole():
    assert describe_bands([band(1.2, 2.0, "9 rows"), band(1.3, 1.7, "34 compressed rows")]) == (
        "off by ×1.20 typically, ×2.00 at worst (9 rows); off by ×1.30 typically, ×1.70 at worst (34 compressed rows)")
