"""The process that runs a Core AI asset in Core AI's bundled CPU reference runtime:
`python -m mlbench.backends.coreai.reference_child ASSET FOLDER FUNCTION`.

It reads ``FOLDER/inputs-<i>.npz`` (i = 0, 1, …), casts each input to the dtype the function declares, runs
the function once per file and writes ``FOLDER/outputs-<i>.npz`` (in the function's output order), then
``FOLDER/done.json`` (output names, each call's seconds, and the runtime's own ``Profiler`` intervals of each
``call.coreai.<op>`` summed per op over the calls), each file renamed into place once complete. A function with
states (a KV cache) starts from ``FOLDER/states-in.npz`` where given (else zeros of each state's declared shape
and type), carries them from call to call, and leaves their final values in ``FOLDER/states.npz``. It leaves
with ``os._exit(0)`` without running C++ destructors: Core AI's runtime may abort (SIGABRT) at interpreter exit,
and whatever happens after ``done.json`` is written, the results are already handed over.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

DONE = "done.json"
STATES_IN = "states-in.npz"
STATES_OUT = "states.npz"


def _initial_states(desc: Any, given: Path) -> dict[str, Any]:
    """Each state of the function as an NDArray the runtime updates in place: the given value (cast to the
    state's type) or zeros of its declared shape."""
    import numpy as np
    from coreai.runtime import NDArray

    names = list(desc.state_names)
    values = dict(np.load(given)) if given.exists() else {}
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise SystemExit(f"the function has no state {', '.join(unknown)} (its states: {', '.join(names) or 'none'})")
    states = {}
    for name in names:
        spec = desc.state_descriptor(name)
        value = values[name] if name in values else np.zeros([int(d or 1) for d in spec.shape])
        states[name] = NDArray(np.ascontiguousarray(np.asarray(value).astype(spec.dtype)))
    return states


def _write_atomic(path: Path, write: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as handle:
        write(handle)
    partial.replace(path)


class OpTimes:
    """The runtime's profiling intervals, kept per `call.coreai.<op>` (and the whole `Function Execute`)."""

    PREFIX = "call."

    def __init__(self) -> None:
        self.open: dict[int, tuple[str, int]] = {}
        self.ops: dict[str, list[int]] = {}  # op -> [calls, ticks]
        self.execute: list[int] = []
        self.next_id = 0

    def begin(self, event: Any) -> int:
        self.next_id += 1
        self.open[self.next_id] = (event.event_id, event.timestamp)
        return self.next_id

    def end(self, event: Any, interval: int) -> None:
        name, started = self.open.pop(interval, (event.event_id, event.timestamp))
        ticks = max(0, event.timestamp - started)
        if name == "Function Execute":
            self.execute.append(ticks)
        elif name.startswith(self.PREFIX + "coreai."):
            row = self.ops.setdefault(name.removeprefix(self.PREFIX), [0, 0])
            row[0] += 1
            row[1] += ticks


async def _run(asset_path: Path, folder: Path, function: str) -> dict[str, Any]:
    import numpy as np
    from coreai.authoring import AIModelAsset
    from coreai.runtime import NDArray, Profiler

    from mlbench.memory import MemoryMeter

    samples = sorted(folder.glob("inputs-*.npz"), key=lambda p: int(p.stem.split("-")[1]))
    seconds: list[float] = []
    times = OpTimes()
    profiler = Profiler(on_log_event_begin=times.begin, on_log_event_end=times.end)
    meter = MemoryMeter.start()  # memory.load and memory.peak of the reference runtime (not a device's)
    async with AIModelAsset.load(asset_path).executable() as model:
        call = model.load_function(function, profiler=profiler)
        if call is None:
            raise SystemExit(f"the asset has no function {function!r} (it has {', '.join(model.function_names)})")
        desc = call.desc
        states = _initial_states(desc, folder / STATES_IN)
        meter.loaded()
        for index, sample in enumerate(samples):
            with np.load(sample) as data:
                feeds = {name: NDArray(np.ascontiguousarray(data[name].astype(desc.input_descriptor(name).dtype)))
                         for name in desc.input_names}
            started = time.perf_counter()
            outputs = await call(feeds, state=states)
            seconds.append(time.perf_counter() - started)
            arrays = {f"o{i}": np.asarray(outputs[name].numpy()) for i, name in enumerate(desc.output_names)}
            _write_atomic(folder / f"outputs-{index}.npz", lambda handle, arrays=arrays: np.savez(handle, **arrays))
        memory = {"metrics": {name: metric.model_dump(mode="json") for name, metric in
                              meter.metrics(source="reference").items()}, "facts": meter.facts()}
        if states:
            finals = {name: np.asarray(array.numpy()) for name, array in states.items()}
            save: Any = np.savez  # typed as if a state could be named allow_pickle
            _write_atomic(folder / STATES_OUT, lambda handle: save(handle, **finals))
        return {"output_names": list(desc.output_names), "state_names": list(desc.state_names), "input_names": list(desc.input_names),
                "seconds": seconds, "execute_ticks": times.execute, "memory": memory,
                "ops": [{"op": op, "calls": calls, "ticks": ticks} for op, (calls, ticks) in
                        sorted(times.ops.items(), key=lambda kv: -kv[1][1])]}


def watch_lifeline() -> None:
    """Exit when the process that started this one is gone: the descriptor named by MLBENCH_COREAI_LIFELINE is
    the read end of a pipe whose only write end that process holds (end-of-file: it closed or died)."""
    import threading

    fd = os.environ.get("MLBENCH_COREAI_LIFELINE")
    if fd is None or not fd.isdigit():
        return

    def watch() -> None:
        while True:
            try:
                data = os.read(int(fd), 1)
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                os._exit(86)

    threading.Thread(target=watch, daemon=True, name="lifeline").start()


def main(argv: list[str]) -> None:
    watch_lifeline()
    asset_path, folder, function = Path(argv[0]), Path(argv[1]), argv[2]
    result = asyncio.run(_run(asset_path, folder, function))
    _write_atomic(folder / DONE, lambda handle: handle.write(json.dumps(result).encode()))


if __name__ == "__main__":  # pragma: no cover - run as a process (reference.run_reference)
    main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
