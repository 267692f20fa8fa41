"""The eager PyTorch backend: the baseline every export is compared with.

Nothing is exported: the "artifact" is the model cast to the variant's precision. Its float32
CPU variant is the reference that verification measures every other variant against.
torch is imported inside methods so that validating a pipeline never imports it.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mlbench.backends.base import Backend, CallTimer, Exported, Measurement, VariantSkipped, runtime_metrics
from mlbench.backends.torch.target import TorchTarget
from mlbench.matrix import Variant
from mlbench.memory import MemoryMeter, MemoryRound, absent_memory
from mlbench.plugins.spec import REFERENCE
from mlbench.records import Metric
from mlbench.sources.loading import LoadedModel, flatten_outputs
from mlbench.sustained import sustained_figures as sustained
from mlbench.thread_check import timed_with_check, torch_threads
from mlbench.timing import time_calls, time_once

EAGER_LOAD = ("eager: the module was built by its model source before the measurement (memory.load is its weights' "
              "bytes); memory.peak counts what its first prediction adds")
LOAD_METHOD = ("the bytes of the module's parameters and buffers (each storage once, as cast to the variant's "
               "precision), not a resident-memory reading: the module is built by its model source before the "
               "measurement, so no span of this process holds its load alone")


def weights_bytes(module: Any) -> int:
    """The bytes of a module's CPU parameters and buffers, each storage counted once (tied weights share one)."""
    import itertools

    seen: set[int] = set()
    total = 0
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        storage = tensor.untyped_storage()
        if tensor.device.type != "cpu" or storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total


def _with_load(memory: dict[str, Metric], module: Any) -> dict[str, Metric]:
    """`memory.load` as the module's weights' bytes (`LOAD_METHOD`)."""
    return {**memory, "memory.load": Metric(value=float(weights_bytes(module)), unit="bytes", source="measured")}


class TorchBackend(Backend):
    name = "torch"
    generative = True
    target: TorchTarget

    def export(self, model: LoadedModel, variant: Variant) -> Exported:
        import torch

        dtype = getattr(torch, variant.axis("precision"))
        module = model.torch_module if dtype == torch.float32 else copy.deepcopy(model.torch_module).to(dtype)
        return Exported(payload=module)

    def _prepare(self, model: LoadedModel, exported: Exported, variant: Variant) -> Callable[[], Any]:
        """The module on its device and its inputs, as one call (synchronised on accelerators)."""
        import torch

        device = variant.axis("device")
        _require_device(device)
        dtype = getattr(torch, variant.axis("precision"))
        module = exported.payload.to(device)
        inputs = [t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device)
                  for t in model.sample(0, model.alternative(variant.shape))[0]]
        if device == "cpu":  # nothing to wait for: the module itself, no wrapper frame per call
            return functools.partial(module, *inputs)
        sync = _synchronizer(device)

        def call() -> object:
            out = module(*inputs)
            sync()
            return out

        return call

    @contextmanager
    def _settings(self) -> Iterator[None]:
        """Inference mode, and the target's thread count when it sets one (only then: re-setting torch's
        thread pools costs the calls that follow)."""
        import torch

        previous = torch.get_num_threads()
        if self.target.threads and self.target.threads != previous:
            torch.set_num_threads(self.target.threads)
        try:
            with torch.inference_mode():
                yield
        finally:
            if torch.get_num_threads() != previous:
                torch.set_num_threads(previous)

    def measure(self, model: LoadedModel, exported: Exported, variant: Variant) -> Measurement:
        import torch

        device, precision = variant.axis("device"), variant.axis("precision")
        if model.spec.generate is not None:
            return self._measure_generation(model, exported, variant)
        settings = self.config.latency
        sustained_metrics: dict[str, Metric] = {}
        sustained_details: dict = {}
        meter = MemoryMeter.start()
        call = self._prepare(model, exported, variant)
        meter.loaded()
        try:
            with self._settings():
                first_ms, output = time_once(call)
                # after the first call, as every memory round reads it (the thread check's pools and the timed
                # calls are not the variant's load)
                memory = (_with_load(meter.metrics(load_reason=EAGER_LOAD), exported.payload) if device == "cpu"
                          else absent_memory(f"the {device} device's memory is not read (host memory would not "
                                             "show it)"))
                threads = torch.get_num_threads() if device == "cpu" else None
                latency, check = timed_with_check(  # one thread where the pool stalls: _settings sets it back
                    call, configured=threads, first_ms=first_ms, set_threads=torch_threads,
                    time_with=lambda count: time_calls(call, warmup=settings.warmup, repeats=settings.repeats,
                                                       min_time_s=settings.min_time_s,
                                                       max_repeats=settings.max_repeats, threads=count))
                sustained(call, settings, sustained_metrics, sustained_details)
        finally:
            if device != "cpu":
                exported.payload.to("cpu")
        details: dict = {"memory": {**meter.facts(), "load": LOAD_METHOD},
                         **({"thread_check": check.details()} if check is not None else {}), **sustained_details}
        memory.update(sustained_metrics)
        if device == "cpu" and precision == "float32":
            return Measurement(metrics={**runtime_metrics(latency, first_ms=first_ms), **memory}, latency=latency,
                               details={"verify": f"this variant is the reference ({REFERENCE})", **details})
        from mlbench.verify import compare_samples  # numpy: kept off the validate path

        def outputs(result: object) -> list:
            return [t.detach().float().cpu().numpy() for _, t in flatten_outputs(result)]

        dtype = getattr(torch, precision)
        alternative = model.alternative(variant.shape)
        pairs = [(model.sample(0, alternative)[1], outputs(output))]
        for index in range(1, self.config.verify.samples):  # further seeded input sets, after the timing
            sample_inputs, reference = model.sample(index, alternative)
            moved = [t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device)
                     for t in sample_inputs]
            with torch.inference_mode():
                pairs.append((reference, outputs(exported.payload.to(device)(*moved))))
            if device != "cpu":
                exported.payload.to("cpu")
        verify = compare_samples(pairs, tolerance=self.config.verify.tolerance_for(precision),
                                 min_snr_db=self.config.verify.min_snr_db_for(precision), reference_name=REFERENCE)
        return Measurement(metrics={**runtime_metrics(latency, first_ms=first_ms, verify=verify), **memory},
                           latency=latency, verify=verify, details=details)

    def memory_round(self, model: LoadedModel, exported: Exported, variant: Variant) -> dict[str, Metric] | None:
        """The module's inputs prepared inside the meter's span, then its first call, as `measure` reads it (CPU
        only: no other device's memory is read; a generative model's memory is measured once)."""
        if variant.axis("device") != "cpu" or model.spec.generate is not None:
            return None
        with self._settings():
            return _with_load(MemoryRound(1, EAGER_LOAD).one(
                lambda: self._prepare(model, exported, variant)), exported.payload)

    def _measure_generation(self, model: LoadedModel, exported: Exported, variant: Variant) -> Measurement:
        import torch

        from mlbench.backends.torch.generate import measure_generation

        device = variant.axis("device")
        _require_device(device)
        try:
            with self._settings():
                return measure_generation(model, exported.payload.to(device), variant, self.config,
                                          sync=_synchronizer(device),
                                          threads=torch.get_num_threads() if device == "cpu" else None)
        finally:
            if device != "cpu":
                exported.payload.to("cpu")

    def call_timer(self, model: LoadedModel, exported: Exported, variant: Variant) -> CallTimer:
        import torch

        call = self._prepare(model, exported, variant)
        if variant.axis("device") != "cpu":
            return CallTimer(call, context=self._settings, release=lambda: exported.payload.to("cpu"))
        chosen: list[int | None] = [None]  # the stall check's choice, which each block's settings then keep

        @contextmanager
        def context() -> Iterator[None]:
            with self._settings():
                if chosen[0] is not None:
                    torch_threads(chosen[0])
                yield

        def set_threads(count: int) -> None:
            chosen[0] = count
            torch_threads(count)

        with self._settings():
            configured = torch.get_num_threads()
        return CallTimer(call, context=context, threads=configured, set_threads=set_threads)


def _require_device(device: str) -> None:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise VariantSkipped("CUDA is not available on this machine")
    if device == "mps" and not torch.backends.mps.is_available():
        raise VariantSkipped("MPS is not available on this machine (it needs macOS on Apple silicon)")


def _synchronizer(device: str):
    import torch

    if device == "cuda":
        return torch.cuda.synchronize
    if device == "mps":
        return torch.mps.synchronize
    return lambda: None
