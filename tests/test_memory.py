"""Measured memory (mlbench/memory.py): how each system's probe reads it, the meter's figures, and that a
backend's memory.peak grows with the batch it predicts on."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest

from mlbench.memory import (
    REV1_COUNT,
    TASK_VM_INFO,
    TASK_VM_INFO_COUNT,
    LinuxProbe,
    MacProbe,
    MemoryMeter,
    TaskVmInfo,
)

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")


class FakeProbe:
    """A probe whose readings the test sets, standing for a system's."""

    method = "fake"

    def __init__(self, *, resettable: bool) -> None:
        self.now, self.mark, self.resettable = 0, 0, resettable

    def current(self) -> int:
        return self.now

    def peak(self) -> int | None:
        return self.mark

    def reset_peak(self) -> bool:
        if self.resettable:
            self.mark = self.now
        return self.resettable


def test_the_meter_reports_what_the_load_added_and_the_predictions_peak_above_the_level_before():
    probe = FakeProbe(resettable=True)
    probe.now = probe.mark = 100
    meter = MemoryMeter.start(probe, release=False)
    probe.now, probe.mark = 160, 400  # the load: a transient peak of 400, 160 kept
    meter.loaded()
    probe.mark = 250  # the predictions' peak, after the reset
    metrics = meter.metrics()
    assert (metrics["memory.load"].value, metrics["memory.peak"].value) == (60, 150)
    assert metrics["memory.peak"].source == "measured" and meter.facts()["peak_exact"] is True


def test_without_a_reset_the_peak_is_the_mark_where_it_rose_else_a_lower_bound_said_so():
    probe = FakeProbe(resettable=False)
    probe.now, probe.mark = 100, 900  # an earlier variant left the mark at 900
    meter = MemoryMeter.start(probe, release=False)
    probe.now = 200
    meter.loaded()
    probe.mark = 1200  # rose during the predictions: exact
    assert meter.metrics()["memory.peak"].value == 1100 and meter.exact

    probe.now, probe.mark = 100, 900
    meter = MemoryMeter.start(probe, release=False)
    probe.now = 300
    meter.loaded()
    probe.now = 350  # the mark stayed at 900: only the samples are known
    assert meter.metrics()["memory.peak"].value == 250 and meter.facts()["peak_exact"] is False


def test_without_a_probe_the_figures_are_absent_with_the_reason():
    meter = MemoryMeter(None)
    meter.loaded()
    metrics = meter.metrics()
    assert metrics["memory.peak"].value is None
    assert metrics["memory.peak"].reason == f"mlbench cannot read this process's memory on {sys.platform}"


@linux
def test_linux_resets_the_high_water_mark_through_clear_refs():
    probe = LinuxProbe()
    assert probe.method.startswith("linux VmHWM (/proc/self/status), reset between phases")
    block = bytearray(64 * 2**20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    high = probe.peak()
    del block
    assert probe.reset_peak()
    assert probe.peak() < high - 32 * 2**20


@linux
def test_linux_without_a_writable_clear_refs_says_so_in_the_method(tmp_path):
    probe = LinuxProbe(clear_refs=tmp_path / "absent" / "clear_refs")
    assert not probe.reset_peak()
    assert probe.method.startswith("linux VmHWM, not resettable here (/proc/self/clear_refs: No such file or "
                                   "directory): a phase's peak is the mark where it rose")
    assert probe.current() > 0


class FakeMach:
    """The two Mach calls MacProbe makes, answering as macOS documents them (<mach/task_info.h>)."""

    def __init__(self, footprint: int, peak: int, count: int = TASK_VM_INFO_COUNT) -> None:
        self.footprint, self.peak, self.count = footprint, peak, count
        self.asked: list[tuple[int, int, int]] = []

    def mach_task_self(self) -> int:
        return 259

    def task_info(self, task: int, flavor: int, info, count) -> int:
        self.asked.append((task, flavor, ctypes.cast(count, ctypes.POINTER(ctypes.c_uint32)).contents.value))
        data = ctypes.cast(info, ctypes.POINTER(TaskVmInfo)).contents
        data.phys_footprint, data.ledger_phys_footprint_peak = self.footprint, self.peak
        ctypes.cast(count, ctypes.POINTER(ctypes.c_uint32)).contents.value = self.count
        return 0


def test_macos_reads_phys_footprint_and_its_peak_through_task_info():
    mach = FakeMach(footprint=300 * 2**20, peak=512 * 2**20)
    probe = MacProbe(mach)
    assert (probe.current(), probe.peak(), probe.reset_peak()) == (300 * 2**20, 512 * 2**20, False)
    assert mach.asked[0] == (259, TASK_VM_INFO, TASK_VM_INFO_COUNT)
    assert TaskVmInfo.phys_footprint.offset == 144 and TaskVmInfo.ledger_phys_footprint_peak.offset == 168
    older = MacProbe(FakeMach(footprint=10, peak=99, count=REV1_COUNT))  # before revision 3: no peak
    assert (older.current(), older.peak()) == (10, None)
    assert probe.method.startswith("macOS phys_footprint (task_info TASK_VM_INFO)")


class FailingMach(FakeMach):
    def task_info(self, task: int, flavor: int, info, count) -> int:
        return 5  # KERN_FAILURE


def test_macos_a_failed_task_info_is_an_error_naming_it():
    with pytest.raises(OSError, match=r"task_info\(TASK_VM_INFO\) failed \(kern_return_t 5"):
        MacProbe(FailingMach(0, 0)).current()


# -- a backend's memory.peak grows with its batch ---------------------------------------------------

WIDE = """\
import torch


class Wide(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 64, 3, padding=1)
        self.head = torch.nn.Conv2d(64, 4, 1)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)))
"""


def _measure_batches(tmp_path: Path, target: dict) -> dict[int, object]:
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import expand
    from mlbench.plugins.registry import backend_class
    from mlbench.sources.loading import load_model
    from mlbench.store.cache import ArtifactCache

    (tmp_path / "wide.py").write_text(WIDE)
    measured = {}
    for batch in (1, 16):  # the small batch first: what it frees cannot hide the large one's growth
        config = PipelineConfig.model_validate({
            "version": 1, "name": "memory",
            "models": [{"name": "wide", "source": "wide.py:Wide",
                        "inputs": [{"name": "x", "shape": [batch, 3, 96, 96]}]}],
            "targets": [target], "latency": {"warmup": 1, "repeats": 3, "min_time_s": 0.0},
            "verify": {"samples": 1}})
        loaded = load_model(config.models[0], seed=0, base_dir=tmp_path)
        variant = expand(config)[0]
        backend = backend_class(target["backend"])(config.targets[0], config, ArtifactCache(tmp_path / "cache"))
        backend.base_dir = tmp_path
        measurement = backend.measure(loaded, backend.export(loaded, variant), variant)
        measured[batch] = measurement
    return measured


def _activation_bytes(batch: int) -> int:
    return batch * 64 * 96 * 96 * 4  # the conv's float32 output, the largest activation


@linux
@pytest.mark.torch
@pytest.mark.parametrize("target", [{"backend": "torch"}, {"backend": "onnxruntime"}], ids=["eager", "onnxruntime"])
def test_measured_peak_grows_with_the_batch(tmp_path, target):
    pytest.importorskip("torch")
    if target["backend"] == "onnxruntime":
        pytest.importorskip("onnxruntime")
    measured = _measure_batches(tmp_path, target)
    small, large = (measured[b].metrics["memory.peak"] for b in (1, 16))
    assert small.source == large.source == "measured"
    # 15 more images: at least their conv outputs (about 35 MB) more at the peak
    assert large.value - small.value > 15 * _activation_bytes(1) * 0.9
    assert measured[16].details["memory"]["method"].startswith("linux VmHWM")
    load = measured[16].metrics["memory.load"]
    if target["backend"] == "torch":
        # the module's weights: conv 64x3x3x3 + 64, head 4x64 + 4 floats (built before the measurement)
        assert load.source == "measured" and load.value == (64 * 27 + 64 + 4 * 64 + 4) * 4
        assert measured[16].details["memory"]["load"].startswith("the bytes of the module's parameters and buffers")
    else:
        assert load.source == "measured" and load.value >= 0


def test_the_memory_limits_message_gives_the_peak_the_child_saw():
    from mlbench.run.limits import ChildLimits, out_of_memory

    limits = ChildLimits(memory_gb=2)
    error = "measure: RuntimeError: [enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"
    assert out_of_memory(error, limits, 1_234_000_000) == (
        "out of memory: over the limit of 2 GB (limits.memory_gb, peak resident memory seen 1.2 GB); " + error)
    assert out_of_memory(error, limits) == f"out of memory: over the limit of 2 GB (limits.memory_gb); {error}"
    assert out_of_memory("measure: ValueError: no", limits, 10) is None


@linux
def test_a_child_reports_its_own_peak_beside_a_failure():
    from mlbench.memory import own_peak
    from mlbench.run.child import _peak_if

    assert _peak_if(None) is None
    peak = _peak_if("measure: MemoryError")
    assert peak is not None and peak >= 10 * 2**20 and own_peak() >= peak


@pytest.mark.torch
def test_eager_load_counts_each_weight_storage_once_at_the_variants_precision():
    torch = pytest.importorskip("torch")
    from mlbench.backends.torch.backend import weights_bytes

    linear = torch.nn.Linear(16, 8)
    tied = torch.nn.Sequential(linear, torch.nn.ReLU(), linear)  # one Linear twice: its weights once
    norm = torch.nn.BatchNorm1d(8)  # running mean and var and the batch count are buffers
    assert weights_bytes(tied) == (16 * 8 + 8) * 4
    assert weights_bytes(norm) == (8 + 8 + 8 + 8) * 4 + 8
    assert weights_bytes(linear.to(torch.bfloat16)) == (16 * 8 + 8) * 2
