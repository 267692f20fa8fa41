"""Each runtime's thread pool under the stall check, through the real runtimes: ONNX Runtime (a second session
with one intra-op thread), ExecuTorch (its process-wide pool reset, the method released before and loaded
again after) and LiteRT (a second interpreter with `num_threads=1`), and their `mlbench ab` timers (ExecuTorch's
offers no switch). The check's factor is set so that every pool reads as stalled, or none does: what is tested is that each backend then measures with the count the
check chose, says so, and still computes the right outputs (an ExecuTorch method run on a pool that was
replaced would read freed memory). The stall itself is reproduced under a busy loop in
tests/test_thread_check.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import mlbench.thread_check as thread_check

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # one export per runtime

MODEL = """\
import torch


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.head = torch.nn.Linear(16 * 32 * 32, 10)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).flatten(1))
"""

TARGETS = {
    "onnxruntime": ({"backend": "onnxruntime", "intra_op_threads": 2}, ("onnxruntime",)),
    "executorch": ({"backend": "executorch", "delegate": ["xnnpack"]}, ("executorch",)),
    "litert": ({"backend": "litert", "threads": [2]}, ("litert_torch", "ai_edge_litert")),
}


def _measure(tmp_path: Path, target: dict):
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import expand
    from mlbench.plugins.registry import backend_class
    from mlbench.sources.loading import load_model
    from mlbench.store.cache import ArtifactCache

    (tmp_path / "small.py").write_text(MODEL)
    config = PipelineConfig.model_validate({
        "version": 1, "name": "threads",
        "models": [{"name": "small", "source": "small.py:Small", "inputs": [{"name": "x", "shape": [1, 3, 32, 32]}]}],
        "targets": [target], "latency": {"warmup": 1, "repeats": 10, "min_time_s": 0.0}, "verify": {"samples": 2}})
    loaded = load_model(config.models[0], seed=0, base_dir=tmp_path)
    variant = expand(config)[0]
    backend = backend_class(target["backend"])(config.targets[0], config, ArtifactCache(tmp_path / "cache"))
    backend.base_dir = tmp_path
    exported = backend.export(loaded, variant)
    return (lambda: backend.measure(loaded, exported, variant)), (lambda: backend.call_timer(loaded, exported, variant))


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: every pool has one thread, nothing to check")
@pytest.mark.parametrize("name", list(TARGETS))
def test_each_runtime_measures_with_one_thread_when_its_pool_is_stalled_and_as_configured_when_not(
        tmp_path, monkeypatch, name):
    target, modules = TARGETS[name]
    for module in modules:
        pytest.importorskip(module)
    measure, call_timer = _measure(tmp_path, target)

    monkeypatch.setattr(thread_check, "STALL_FACTOR", 0.0)  # every pool reads as stalled
    stalled = measure()
    check = stalled.details["thread_check"]
    assert check["stalled"] and check["configured"] == 2
    assert stalled.latency is not None and stalled.latency.threads == 1
    assert stalled.latency.stability is not None
    assert stalled.latency.stability.adjustments[-1].startswith("measured with 1 thread: 2 threads read ")
    assert stalled.verify is not None and stalled.verify.passed, stalled.verify
    assert stalled.metrics["memory.peak"].value is not None

    monkeypatch.setattr(thread_check, "STALL_FACTOR", 1e9)  # none does
    steady = measure()
    assert not steady.details["thread_check"]["stalled"]
    assert steady.latency is not None and steady.latency.threads in (2, None)  # ONNX Runtime's default: None
    assert steady.latency.stability is None or not steady.latency.stability.adjustments
    assert steady.verify is not None and steady.verify.passed
    if name == "executorch":  # the process-wide pool is left as this process had it
        from mlbench.backends.executorch.threads import PoolSwitch

        assert PoolSwitch.configured() == 2

    timer = call_timer()  # `mlbench ab`'s copy: the same check, then its pool switched for the rounds
    if name == "executorch":  # a process-wide pool every copy holds at once: no switch offered
        assert timer.set_threads is None and timer.check_threads() is None
        return
    monkeypatch.setattr(thread_check, "STALL_FACTOR", 0.0)
    check = timer.check_threads()
    assert check is not None and check.stalled and check.configured == timer.threads == 2
    timer.use_threads(1)
    assert len(timer.time(calls=3, warmup=1)) == 3
    timer.close()
