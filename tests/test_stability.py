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
    assert busy.note() == "unreliable: cv 0.07, IQR/median 0.09; other processes used 99% of the CPUs"


def test_too_few_samples_are_noisy():
    result = grade([1.0, 1.0, 1.0])
    assert (result.grade, result.reasons) == ("noisy", ["only 3 samples (fewer than 10)"])
