"""Resident memory of this process, read outside the timed loop: what loading an artifact adds
(`memory.load`) and the peak while its predictions run (`memory.peak`), in bytes.

A backend's measurement brackets its phases with a `MemoryMeter`:

    meter = MemoryMeter.start()      # the level before loading (after a collection and malloc_trim)
    session = load(...)
    meter.loaded()                   # memory.load: what the load added; the peak is reset here
    first = call(); time_calls(call, ...)
    metrics.update(meter.metrics())  # memory.peak: the predictions' peak above the level before loading

One round's figures move by whole buffers with the allocator's state (which freed chunks it reuses, which it
hands back), within one process as across runs: resnet18's eager peak read 23.6 to 48.7 MB over four identical
runs, yet rounds repeated in one process mostly agree (the state settles per process). So where a pipeline
sets `memory.rounds`, the run measures that many rounds after the timed one, each in a fresh child
(`Backend.memory_round`: a load and its first call, `MemoryRound`, read as the timed round reads it, after its
first call; `mlbench/run/memory_rounds.py`). Each figure is the rounds' median (`median_of_rounds`), with the
rounds' values as its `samples` and their largest minus smallest as its `spread`, which widens compare's noise
floor (`mlbench/compare/trust.py`).

Nothing here runs inside the timing loop: each read is one small file read (Linux) or one system call
(macOS) before or after it, so `benchmarks/harness_overhead.py` sees the same loop as before.

How the peak is read, per system (the record's `details.memory.method` names which one ran):

- Linux: `VmHWM` of `/proc/self/status` (the resident high-water mark), reset between the phases by
  writing 5 to `/proc/self/clear_refs` (proc(5), since Linux 4.0). Where that file cannot be written (a
  hardened container), the high-water mark cannot be reset: a phase's peak is exact when the mark rose
  during it (it was set then), else only the largest `VmRSS` sampled around the phase is known, a lower
  bound, and the method says so.
- macOS: the task's physical footprint, what jetsam judges (`task_info(mach_task_self(), TASK_VM_INFO)`,
  <mach/task_info.h>: `phys_footprint`, and `ledger_phys_footprint_peak`, its lifetime peak, from revision
  3 of the structure). The lifetime peak cannot be reset through a public API, so a phase's peak is exact
  when the peak rose during it, else the largest footprint sampled around it (a lower bound, said so).
"""

from __future__ import annotations

import ctypes
import gc
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mlbench.records import Metric, Source

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
RESET_PEAK = b"5"  # proc(5): "5 (since Linux 4.0): reset the peak resident set size (VmHWM)"
TASK_VM_INFO = 22  # <mach/task_info.h>
KERN_SUCCESS = 0


class Probe(Protocol):
    """Reads this process's memory: `current()` and `peak()` in bytes; `reset_peak()` True when it could."""

    method: str

    def current(self) -> int: ...

    def peak(self) -> int | None: ...

    def reset_peak(self) -> bool: ...


def _status_kib(text: str, field_name: str) -> int | None:
    for line in text.splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024
    return None


class LinuxProbe:
    """VmRSS and VmHWM of /proc/self/status; the mark reset through /proc/self/clear_refs."""

    def __init__(self, status: Path = STATUS, clear_refs: Path = CLEAR_REFS) -> None:
        self.status, self.clear_refs = status, clear_refs
        self.why_not_reset = self._try_reset()
        self.method = ("linux VmHWM (/proc/self/status), reset between phases by writing 5 to /proc/self/clear_refs"
                       if self.why_not_reset is None else
                       f"linux VmHWM, not resettable here ({self.why_not_reset}): a phase's peak is the mark where it "
                       "rose during the phase, else the largest VmRSS sampled around it (a lower bound)")

    def _try_reset(self) -> str | None:
        try:
            with open(self.clear_refs, "wb", buffering=0) as handle:
                handle.write(RESET_PEAK)
        except OSError as exc:
            return f"/proc/self/clear_refs: {exc.strerror or exc}"
        return None

    def _read(self, name: str) -> int | None:
        return _status_kib(self.status.read_text(), name)

    def current(self) -> int:
        return self._read("VmRSS") or 0

    def peak(self) -> int | None:
        return self._read("VmHWM")

    def reset_peak(self) -> bool:
        return self.why_not_reset is None and self._try_reset() is None


class TaskVmInfo(ctypes.Structure):
    """`task_vm_info_data_t` of <mach/task_info.h> up to revision 3's first field (packed to 4 bytes, as the
    header's `#pragma pack(push, 4)` declares)."""

    _pack_ = 4
    _fields_ = [
        ("virtual_size", ctypes.c_uint64), ("region_count", ctypes.c_int32), ("page_size", ctypes.c_int32),
        *((name, ctypes.c_uint64) for name in (
            "resident_size", "resident_size_peak", "device", "device_peak", "internal", "internal_peak", "external",
            "external_peak", "reusable", "reusable_peak", "purgeable_volatile_pmap", "purgeable_volatile_resident",
            "purgeable_volatile_virtual", "compressed", "compressed_peak", "compressed_lifetime")),
        ("phys_footprint", ctypes.c_uint64),  # revision 1
        ("min_address", ctypes.c_uint64), ("max_address", ctypes.c_uint64),  # revision 2
        ("ledger_phys_footprint_peak", ctypes.c_int64),  # revision 3
    ]


TASK_VM_INFO_COUNT = ctypes.sizeof(TaskVmInfo) // 4  # in natural_t (4-byte) units
REV1_COUNT = TaskVmInfo.min_address.offset // 4  # enough for phys_footprint
REV3_COUNT = TASK_VM_INFO_COUNT


class MacProbe:
    """phys_footprint through task_info(TASK_VM_INFO); `libc` is the C library (a fake in tests)."""

    method = ("macOS phys_footprint (task_info TASK_VM_INFO); its lifetime peak (ledger_phys_footprint_peak) "
              "cannot be reset: a phase's peak is that peak where it rose during the phase, else the largest "
              "footprint sampled around it (a lower bound)")

    def __init__(self, libc: Any = None) -> None:
        self.libc = libc if libc is not None else ctypes.CDLL(None)
        self._task = self.libc.mach_task_self()

    def _info(self) -> tuple[TaskVmInfo, int]:
        info = TaskVmInfo()
        count = ctypes.c_uint32(TASK_VM_INFO_COUNT)
        status = self.libc.task_info(self._task, TASK_VM_INFO, ctypes.byref(info), ctypes.byref(count))
        if status != KERN_SUCCESS or count.value < REV1_COUNT:
            raise OSError(f"task_info(TASK_VM_INFO) failed (kern_return_t {status}, count {count.value})")
        return info, count.value

    def current(self) -> int:
        return int(self._info()[0].phys_footprint)

    def peak(self) -> int | None:
        info, count = self._info()
        return int(info.ledger_phys_footprint_peak) if count >= REV3_COUNT else None

    def reset_peak(self) -> bool:
        return False


def default_probe() -> Probe | None:
    """The probe for this system; None where mlbench has none (then the figures are absent, saying so)."""
    try:
        if sys.platform.startswith("linux") and STATUS.exists():
            return LinuxProbe()
        if sys.platform == "darwin":
            return MacProbe()
    except (OSError, AttributeError):
        return None
    return None


NO_PROBE = f"mlbench cannot read this process's memory on {sys.platform}"


def release_free_memory() -> None:
    """Collect garbage and hand the C heap's free pages back (glibc's malloc_trim), so that what an earlier
    variant freed is not counted in nor hidden from the next one's figures."""
    gc.collect()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl): its heap is left as it is
            pass


@dataclass
class MemoryMeter:
    """The memory of one variant's load and predictions (see the module docstring)."""

    probe: Probe | None
    baseline: int = 0
    after_load: int | None = None
    samples: list[int] = field(default_factory=list)
    peak_before: int | None = None  # the mark before the predictions, where it cannot be reset
    exact: bool = True

    @classmethod
    def start(cls, probe: Probe | None = None, *, release: bool = True) -> MemoryMeter:
        """The level before loading, after giving free memory back (`release`)."""
        meter = cls(probe if probe is not None else default_probe())
        if meter.probe is None:
            return meter
        if release:
            release_free_memory()
        meter.baseline = meter.probe.current()
        return meter

    def loaded(self) -> None:
        """After the load: what it added; then the predictions' peak starts from here."""
        if self.probe is None:
            return
        self.after_load = self.probe.current()
        self.samples = [self.after_load]
        if not self.probe.reset_peak():
            self.peak_before = self.probe.peak()

    def sample(self) -> None:
        """One more reading of the current level (outside the timed loop), for a probe that cannot reset."""
        if self.probe is not None:
            self.samples.append(self.probe.current())

    def predictions_peak(self) -> int | None:
        """The predictions' peak in bytes, absolute; sets `exact`."""
        if self.probe is None or self.after_load is None:
            return None
        self.sample()
        mark = self.probe.peak()
        if self.peak_before is None and mark is not None:  # reset after the load: the mark is this phase's
            return mark
        if mark is not None and self.peak_before is not None and mark > self.peak_before:
            return mark  # the mark rose during the predictions: it was set then
        self.exact = False
        return max(self.samples)

    def metrics(self, source: Source = "measured", *, load_reason: str | None = None) -> dict[str, Metric]:
        """`memory.load` and `memory.peak` (bytes above the level before loading), with `source`; absent
        with the reason where this system has no probe. `load_reason`: why a backend reports no load."""
        if self.probe is None:
            return absent_memory(NO_PROBE)
        peak = self.predictions_peak()
        metrics: dict[str, Metric] = {}
        if load_reason is not None or self.after_load is None:
            metrics["memory.load"] = Metric.absent("bytes", load_reason or "the load was not measured")
        else:
            metrics["memory.load"] = Metric(value=max(0, self.after_load - self.baseline), unit="bytes", source=source)
        metrics["memory.peak"] = (Metric(value=max(0, peak - self.baseline), unit="bytes", source=source)
                                  if peak is not None else Metric.absent("bytes", "the predictions were not measured"))
        return metrics

    def facts(self) -> dict[str, Any]:
        """What a record's details keep: the method, the levels read and whether the peak is exact."""
        if self.probe is None:
            return {"method": None, "reason": NO_PROBE}
        return {"method": self.probe.method, "baseline_bytes": self.baseline, "after_load_bytes": self.after_load,
                "peak_exact": self.exact,
                "note": "memory.peak: the first prediction's peak above the level "
                        "before loading; read outside the timed loop"}


ROUNDS_NOTE = ("memory.load and memory.peak: the median over {n} load-and-predict rounds, each in a process of "
               "its own, started fresh after the timed measurement (samples: each round's figure; spread: the "
               "largest minus the smallest); the timed measurement's own figures, from a process that had built the "
               "model and run other work first, are in timed_round")


def median_of_rounds(rounds: list[dict[str, Metric]]) -> dict[str, Metric]:
    """Each memory figure as the median of the rounds that measured it, with the rounds' values (`samples`) and
    their spread (largest minus smallest); a figure fewer than two rounds measured stays as the first gave it."""
    merged = dict(rounds[0])
    for name in ("memory.load", "memory.peak"):
        values = [float(v) for r in rounds if (m := r.get(name)) is not None and (v := m.value) is not None]
        first = merged.get(name)
        if len(values) < 2 or first is None or first.value is None:
            continue
        merged[name] = first.model_copy(update={"value": float(statistics.median(values)), "samples": values,
                                                "spread": max(values) - min(values)})
    return merged


@dataclass
class MemoryRound:
    """One untimed load-and-predict round, measured as the timed one is: `load` builds what it predicts with
    and returns its call (the meter brackets it), then the call is made `calls` times."""

    calls: int
    load_reason: str | None = None

    def one(self, load: Callable[[], Callable[[], object]]) -> dict[str, Metric]:
        meter = MemoryMeter.start()
        call = load()
        meter.loaded()
        for _ in range(self.calls):
            call()
        figures = meter.metrics(load_reason=self.load_reason)
        del call
        return figures


def absent_memory(reason: str) -> dict[str, Metric]:
    """`memory.load` and `memory.peak` absent, with the reason."""
    return {name: Metric.absent("bytes", reason) for name in ("memory.load", "memory.peak")}


def own_peak() -> int | None:
    """This process's peak resident memory in bytes, without resetting it (Linux: VmHWM since the last reset;
    macOS: the footprint's lifetime peak), or None where it cannot be read."""
    try:
        if sys.platform.startswith("linux"):
            return _status_kib(STATUS.read_text(), "VmHWM")
        if sys.platform == "darwin":
            return MacProbe().peak()
    except (OSError, ValueError, AttributeError):
        return None
    return None
