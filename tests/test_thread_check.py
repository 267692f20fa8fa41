"""The thread-pool stall check (`mlbench.thread_check`): a pool whose threads wait for cores other processes
hold is found before the timed calls, and the figure is taken with one thread, saying so.

The end-to-end test reproduces the stall: a two-input conv+linear model (0.1 ms a call), torch's pool of 2
threads, and a busy loop the test starts (spinning processes in sessions of their own, as other jobs' are).
The measuring child runs with `OMP_WAIT_POLICY=ACTIVE`: libgomp then spins at every barrier, as it does by
default for its first spins, so the stall shows on every run rather than coming and going with how long each
wait lasts (the cause, measured, is in the module's docstring). The unit tests need no torch: calls whose
time depends on the thread count they are switched to.

ExecuTorch and LiteRT run XNNPACK on pthreadpool, whose threads spin only briefly before they sleep, with no
setting like `OMP_WAIT_POLICY` to make them spin: under the same busy loop their stall comes and goes, and is
milder. Measured here with the same model (a check being 2 threads' burst median over one thread's): LiteRT read
3.3x to 3.7x in 4 to 7 checks of 20 per run, the rest about 1.05; ExecuTorch read 2.1x to 26x in 1 or 2 checks of
20, the rest about 1.04. A whole `mlbench run` under the busy loop found the stall in 1 run of 3 (LiteRT, 2.9x)
and 1 of 2 (ExecuTorch, 2.0x). So their test runs 40 checks in a child of its own session (as mlbench's measuring
child is), up to three children, and asserts the check finds the stall at least once (run alone, ExecuTorch's 40
checks later found none in 2 runs of 4, every ratio 1.01 to 1.16); what a backend does with a stalled check (measure
with one thread, and say so) is tested with the check forced, in tests/backends/test_thread_checks.py."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time

import pytest

from mlbench.thread_check import BURST_DEADLINE_S, MAX_CALL_MS, ThreadCheck, check_threads, timed_with_check
from mlbench.timing import time_calls
from tests.test_stability_reports import busy_loop


class Pool:
    """A runtime whose call takes `ms[threads]` milliseconds, spinning (computing) or sleeping (waiting)."""

    def __init__(self, ms: dict[int, float], *, spin: bool = False, threads: int = 2) -> None:
        self.ms, self.spin, self.threads, self.calls = ms, spin, threads, 0
        self.counts: list[int] = []

    def set_threads(self, count: int) -> None:
        self.threads = count
        self.counts.append(count)

    def __call__(self) -> None:
        self.calls += 1
        seconds = self.ms[self.threads] / 1000
        if self.spin:
            until = time.perf_counter() + seconds
            while time.perf_counter() < until:
                pass
        else:
            time.sleep(seconds)


def test_a_pool_far_slower_than_one_thread_is_stalled_and_the_configured_count_is_set_again():
    pool = Pool({2: 20.0, 1: 1.0})
    check = check_threads(pool, configured=2, first_ms=20.0, set_threads=pool.set_threads)
    assert check is not None and check.stalled and check.configured == 2
    assert check.configured_ms >= 20.0 and check.one_thread_ms < 10.0
    assert pool.counts == [2, 1, 2, 1, 2]  # alternating, then the configured count again
    assert check.adjustment().startswith("measured with 1 thread: 2 threads read ")


def test_a_pool_that_gains_from_threads_or_one_thread_configured_is_left_alone():
    faster = Pool({2: 1.0, 1: 1.8})
    check = check_threads(faster, configured=2, first_ms=1.0, set_threads=faster.set_threads)
    assert check is not None and not check.stalled
    assert not ThreadCheck(2, configured_ms=1.4, one_thread_ms=1.0).stalled  # within the factor: not a stall
    assert check_threads(faster, configured=1, first_ms=1.0, set_threads=faster.set_threads) is None
    assert check_threads(faster, configured=None, first_ms=1.0, set_threads=faster.set_threads) is None


def test_a_stalled_pools_bursts_stop_at_the_deadline():
    pool = Pool({2: 60.0, 1: 0.05})
    started = time.perf_counter()
    check = check_threads(pool, configured=2, first_ms=0.05, set_threads=pool.set_threads)  # sized from a quiet call
    assert check is not None and check.stalled
    # 200 calls of 60 ms a side would take 24 s: each burst stops after the deadline, 4 bursts and 4 resize calls
    assert time.perf_counter() - started < 4 * (BURST_DEADLINE_S + 0.06) + 4 * 0.06 + 1.0


def test_a_slow_call_is_checked_when_it_waits_and_left_alone_when_it_computes(monkeypatch):
    import mlbench.thread_check as thread_check

    waiting = Pool({2: MAX_CALL_MS + 50, 1: 1.0})  # sleeping: the process has no CPU time over the call
    check = check_threads(waiting, configured=2, first_ms=MAX_CALL_MS + 50, set_threads=waiting.set_threads)
    assert check is not None and check.stalled
    # a call that computes: its CPU time is most of its wall time (read as the check reads it: a spinning call
    # on this shared machine gets the CPU for only part of its wall time, and is then checked, as it should be)
    computing = Pool({2: MAX_CALL_MS + 50, 1: 2 * MAX_CALL_MS}, spin=True)
    wall_and_cpu = thread_check._wall_and_cpu_ms
    monkeypatch.setattr(thread_check, "_wall_and_cpu_ms", lambda call: (wall_and_cpu(call)[0], MAX_CALL_MS))
    assert check_threads(computing, configured=2, first_ms=MAX_CALL_MS + 50,
                         set_threads=computing.set_threads) is None
    assert computing.calls == 1 and computing.counts == []  # one call told them apart, the pool untouched


def test_a_pool_that_stalls_after_the_check_is_checked_again_and_timed_with_one_thread():
    pool = Pool({2: 1.0, 1: 2.0})  # threads help: the first check finds no stall
    timed: list[int | None] = []

    def time_with(count):
        if not timed:
            pool.ms[2] = 30.0  # the stall starts after the check
        timed.append(count)
        return time_calls(pool, warmup=0, repeats=5, min_time_s=0, max_repeats=5, threads=count)

    latency, check = timed_with_check(pool, configured=2, first_ms=1.0, set_threads=pool.set_threads,
                                      time_with=time_with)
    assert timed == [2, 1] and latency.threads == 1 and latency.median < 10
    assert check is not None and check.stalled and check.timed_before_ms is not None and check.timed_before_ms >= 30
    assert latency.stability is not None and latency.stability.adjustments == [check.adjustment()]
    assert f"in a burst after timed calls that read {check.timed_before_ms:.3g} ms with 2 (the pool stalled" in (
        check.adjustment())
    assert check.details()["timed_before_ms"] == round(check.timed_before_ms, 6)


def test_a_steady_pool_is_timed_once_with_its_configured_count():
    pool = Pool({2: 1.0, 1: 2.0})
    timed: list[int | None] = []

    def time_with(count):
        timed.append(count)
        return time_calls(pool, warmup=0, repeats=5, min_time_s=0, max_repeats=5, threads=count)

    latency, check = timed_with_check(pool, configured=2, first_ms=1.0, set_threads=pool.set_threads,
                                      time_with=time_with)
    assert timed == [2] and latency.threads == 2 and check is not None and not check.stalled
    assert latency.stability is not None and latency.stability.adjustments == []


MODEL = """\
import torch
from torch import nn


class ConvLinear(nn.Module):
    \"\"\"Two inputs, a conv and linears: a few parallel regions per call, 0.1 ms on one core.\"\"\"

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.image = nn.Linear(16 * 32 * 32, 64)
        self.extra = nn.Linear(64, 64)

    def forward(self, image, extra):
        return self.image(torch.relu(self.conv(image)).flatten(1)) + self.extra(extra)
"""

PIPELINE = """\
version: 1
name: stall
models:
  - name: conv_linear
    source: {folder}/conv_linear.py:ConvLinear
    inputs: [{{name: image, shape: [1, 3, 32, 32]}}, {{name: extra, shape: [1, 64]}}]
targets:
  - backend: torch
    device: [cpu]
    precision: [float32]
    threads: 2
latency: {{warmup: 2, repeats: 50, min_time_s: 0.3, retry_s: 0}}
report: {{dir: out, formats: [json, markdown]}}
history: {{enabled: false}}
"""


@pytest.mark.torch
@pytest.mark.slow  # one to three runs under sixteen spinners: ~20 s each on a 2-core machine
def test_a_stalled_torch_pool_under_a_busy_loop_is_found_and_the_figure_taken_with_one_thread(tmp_path, monkeypatch):
    from mlbench.run.progress import PlainProgress
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline

    (tmp_path / "conv_linear.py").write_text(MODEL, encoding="utf-8")
    path = tmp_path / "stall.yaml"
    path.write_text(PIPELINE.format(folder=tmp_path), encoding="utf-8")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the measuring child's libgomp reads it when torch loads
    # the stall, reproduced: 2 threads more than 1.5x slower than 1 (here 2.4x to 1000x from run to run, with how
    # the spinners' bursts fall). One CI run of many read 1.44x, under the factor: a run that does not reproduce
    # it must then time with the configured 2 threads and say nothing, and the next run tries again
    for _ in range(3):
        with busy_loop():
            run(load_pipeline(path), PlainProgress(io.StringIO()))
        (record,) = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))["records"]
        assert record["status"] == "ok", record.get("error")
        check = record["details"]["thread_check"]
        assert check["configured"] == 2, check
        if check["stalled"]:
            break
        assert record["latency"]["threads"] == 2, record["latency"]
        said = record["latency"]["stability"].get("adjustments", [])  # the key is left out when nothing was done
        assert not any(note.startswith("measured with 1 thread") for note in said), said
    assert check["stalled"], check
    median = record["metrics"]["latency.median"]["value"]
    assert record["latency"]["threads"] == 1
    # the model, not the wait: nearer the one-thread burst than the stalled one (a stall is 1.5x or more; one run here
    # read 1.83x, and a median of 0.97x the one-thread burst was then above half the stalled figure)
    assert median < (check["configured_ms"] + check["one_thread_ms"]) / 2, (median, check)
    adjustments = record["latency"]["stability"]["adjustments"]
    # found before the timed calls, or by the check again after them when the stall began later
    when = ("before the timed calls" if check.get("timed_before_ms") is None else
            f"after timed calls that read {check['timed_before_ms']:.3g} ms with 2 (the pool stalled after the first "
            "check), which were timed again")
    assert adjustments == [f"measured with 1 thread: 2 threads read {check['configured_ms']:.3g} ms against "
                           f"{check['one_thread_ms']:.3g} ms with 1 in a burst {when} (a stalled "
                           "thread pool: the other threads wait for cores other processes hold)"]
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert adjustments[0] in markdown


CHECKS = """\
import json, sys
from pathlib import Path

import numpy as np

from mlbench.thread_check import check_threads
from mlbench.timing import time_once

runtime, path, checks = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
arrays = [np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in ((1, 3, 32, 32), (1, 64))]
if runtime == "litert":  # as LitertBackend._timed switches it: a second interpreter with one thread
    from mlbench.backends.litert.runtime import Runner, interpreter

    runners = {2: Runner(interpreter(path, 2))}
    current = [runners[2]]
    feed = current[0].feed(arrays)

    def set_threads(count):
        if count not in runners:
            runners[count] = Runner(interpreter(path, count))
        current[0] = runners[count]

    call, configured = (lambda: current[0](feed)), 2
else:  # as ExecutorchBackend.measure switches it: the process-wide pool reset, the method loaded again
    import torch
    from executorch.runtime import Runtime

    from mlbench.backends.executorch.threads import PoolSwitch

    inputs = [torch.from_numpy(a) for a in arrays]
    load = lambda: Runtime.get().load_program(str(path)).load_method("forward")
    held = [load()]
    set_threads, configured = PoolSwitch(held, load), 2
    set_threads(2)
    call = lambda: held[0].execute(inputs)
found = []
for _ in range(checks):
    first_ms, _ = time_once(call)
    check = check_threads(call, configured=configured, first_ms=first_ms, set_threads=set_threads)
    found.append([check.configured_ms, check.one_thread_ms, check.stalled])
print(json.dumps(found), flush=True)
"""

XNNPACK = {
    "executorch": ({"backend": "executorch", "delegate": ["xnnpack"]}, ("executorch",)),
    "litert": ({"backend": "litert", "threads": [2]}, ("litert_torch", "ai_edge_litert")),
}


def _exported_file(tmp_path, target: dict):
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import expand
    from mlbench.plugins.registry import backend_class
    from mlbench.sources.loading import load_model
    from mlbench.store.cache import ArtifactCache

    (tmp_path / "conv_linear.py").write_text(MODEL, encoding="utf-8")
    config = PipelineConfig.model_validate({
        "version": 1, "name": "stall", "targets": [target],
        "models": [{"name": "conv_linear", "source": "conv_linear.py:ConvLinear",
                    "inputs": [{"name": "image", "shape": [1, 3, 32, 32]}, {"name": "extra", "shape": [1, 64]}]}]})
    backend = backend_class(target["backend"])(config.targets[0], config, ArtifactCache(tmp_path / "cache"))
    backend.base_dir = tmp_path
    payload = backend.export(load_model(config.models[0], seed=0, base_dir=tmp_path), expand(config)[0]).payload
    return payload.pte if target["backend"] == "executorch" else payload.path


@pytest.mark.torch
@pytest.mark.slow  # an export, then 40 to 120 checks under sixteen spinners: 30 to 200 s on a 2-core machine
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: every pool has one thread, nothing to check")
@pytest.mark.parametrize("name", list(XNNPACK))
def test_an_xnnpack_pool_under_a_busy_loop_is_found_stalled(tmp_path, name):
    from tests.conftest import ROOT

    target, modules = XNNPACK[name]
    for module in modules:
        pytest.importorskip(module)
    path = _exported_file(tmp_path, target)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # the stall, reproduced: in at least one check, 2 threads more than STALL_FACTOR times slower than one. Run
    # alone (no other test beside it) ExecuTorch's 40 checks found none in 2 of 4 runs: up to three children
    ratios: list[list[float]] = []
    for _ in range(3):
        with busy_loop():
            done = subprocess.run([sys.executable, "-c", CHECKS, name, str(path), "40"], capture_output=True,
                                  text=True, env=env, start_new_session=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        found = json.loads(done.stdout.splitlines()[-1])
        ratios.append([round(many / one, 2) for many, one, _ in found])
        if any(stalled for _, _, stalled in found):
            break
    assert any(stalled for _, _, stalled in found), ratios
