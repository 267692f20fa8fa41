"""What `mlbench compare` reads can be hostile: impossible figures, duplicated variants and deep nesting are
refused in one line naming the file and the place, and huge sample arrays cost bounded memory."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from mlbench.compare.comparison import compare, parse_rules
from tests.test_compare import rec, run_of


@pytest.mark.parametrize("samples", [20_000, 1_000_000])
def test_the_noise_guard_is_bounded_in_memory_whatever_the_sample_count(samples):
    """`max_repeats: 1000000` is valid: its bootstrap once asked for a 2000 × 1,000,000 array (15 GiB)."""
    rng = random.Random(7)
    base = run_of([rec("m/torch/cpu", [rng.gauss(10.0, 0.5) for _ in range(samples)])], "b")
    head = run_of([rec("m/torch/cpu", [rng.gauss(13.0, 0.5) for _ in range(samples)])], "h")
    tracemalloc.start()
    try:
        result = compare(base, head, parse_rules(["latency.median:+10%"]))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # one float64 copy of each side's samples (16 MB at a million) plus a fixed ~16 MiB working set
    assert peak < 24 * 2**20 + 2 * 8 * samples, f"{peak / 2**20:.0f} MiB"
    variant = result.variants[0]
    assert variant.group == "regressed" and [f.rule for f in variant.findings] == ["latency.median:+10%"]
    noise = next(d.noise for d in variant.deltas if d.metric == "latency.median")
    assert noise is not None and (noise.n_base, noise.n_head) == (samples, samples)
    assert noise.interval is not None and 1.25 < noise.interval[0] < noise.interval[1] < 1.35
    if samples > 100_000:
        assert noise.test == ("Mann–Whitney U (two-sided, normal approximation, a seeded 100,000 of each side's "
                              "samples)")
