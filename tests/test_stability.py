import random
import time

from mlbench.stability import grade, inconclusive, mark
from mlbench.timing import time_calls


def test_a_steady_call_is_stable():
    result = grade([1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0, 1.0, 1.0])
    assert (result.grade, result.reasons, mark(result)) == ("stable", [], "")


def test_a_jittering_call_timed_for_real_is_unreliable():
    rng = random.Random(0)
    latency = time_calls(lambda: time.sleep(rng.choice([0.0005, 0.004])), warmup=1, repeats=20, min_time_s=0,
                         max_repeats=20)
    result = grade(latency.samples)
    assert result.grade == "unreliable" and inconclusive(result) and mark(result) == "⚠"
    assert result.reasons[0].startswith("cv ")


def test_a_noisy_figure_under_load_is_unreliable_and_says_why():
    samples = [1.0, 1.08, 0.95, 1.1, 1.0, 0.9, 1.05, 1.12, 0.97, 1.0]
    assert grade(samples).grade == "noisy"
    busy = grade(samples, {"other_share": 0.99})
    assert busy.grade == "unreliable"
    assert busy.note() == ("unreliable: cv 0.07, IQR/median 0.09, medians of 5 stretches 14% apart; "
                           "other processes used 99% of the CPUs")


def test_too_few_samples_are_noisy():
    result = grade([1.0, 1.0, 1.0])
    assert (result.grade, result.reasons) == ("noisy", ["only 3 samples (fewer than 10)"])


def _steady_with_hiccups(long_calls: int) -> list[float]:
    """200 calls within 1% of 1 ms, `long_calls` of them 10 ms instead: a machine's own hiccups."""
    samples = [1.0 + 0.01 * ((i % 5) - 2) / 2 for i in range(200)]
    return [10.0 if i % (200 // long_calls) == 0 else s for i, s in enumerate(samples)] if long_calls else samples


def test_a_few_long_calls_on_a_quiet_machine_leave_a_figure_stable_but_mark_it_on_a_loaded_one():
    samples = _steady_with_hiccups(4)  # CV 1.07; the median, IQR and p90 do not move
    quiet = grade(samples, {"other_share": 0.01})
    assert (quiet.grade, quiet.reasons) == ("stable", []) and quiet.cv is not None and quiet.cv > 1
    loaded = grade(samples, {"other_share": 0.6})
    assert (loaded.grade, loaded.reasons) == ("noisy", ["cv 1.07, IQR/median 0.01, medians of 5 stretches 0% apart"])
    assert grade(samples).grade == "noisy"  # the load unknown: the CV counts


def test_a_tail_that_moves_the_p90_is_noisy_even_on_a_quiet_machine():
    samples = [2.0 if i % 5 == 0 else 1.0 for i in range(100)]  # a fifth of the calls twice as long
    result = grade(samples, {"other_share": 0.0})
    assert result.grade == "noisy"
    assert result.reasons == ["cv 0.34, IQR/median 0.00, medians of 5 stretches 0% apart", "p90 2.00x the median"]


def _spread(center: float, count: int, seed: int, width: float = 0.15) -> list[float]:
    """`count` calls spread evenly by +-`width` around `center` (IQR/median about `width`), in random order."""
    rng = random.Random(seed)
    return [center * (1 - width + 2 * width * rng.random()) for _ in range(count)]


def test_calls_that_spread_while_their_median_holds_still_are_stable_on_a_quiet_machine():
    """The spread of single calls is not the figure's: a median of 2,000 calls spread by IQR/median 0.14 holds."""
    result = grade(_spread(0.1, 2000, 1), {"other_share": 0.0})
    assert result.iqr_ratio is not None and 0.10 < result.iqr_ratio < 0.20
    assert (result.grade, result.reasons) == ("stable", []) and result.drift is not None and result.drift < 0.05


def test_a_median_that_moves_while_it_is_taken_is_noisy_and_says_how_far():
    """The last two fifths of the calls 15% slower (another job took a core): the stretches' medians part."""
    samples = _spread(0.1, 1200, 2, 0.03) + _spread(0.115, 800, 3, 0.03)
    result = grade(samples, {"other_share": 0.0})
    assert result.grade == "noisy" and result.drift is not None and result.drift > 0.12
    assert result.reasons[0].endswith(f"medians of 5 stretches {result.drift:.0%} apart")
