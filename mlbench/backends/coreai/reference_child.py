"""The process that runs a Core AI asset in Core AI's bundled CPU reference runtime:
`python -m mlbench.backends.coreai.reference_child ASSET FOLDER FUNCTION`.

It reads ``FOLDER/inputs-<i>.npz`` (i = 0, 1, …), casts each input to the dtype the function declares, runs
the function once per file and writes ``FOLDER/outputs-<i>.npz`` (in the function's output order), then
``FOLDER/done.json`` (output names, each call's seconds), each file renamed into place once complete. It leaves
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


def _write_atomic(path: Path, write: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as handle:
        write(handle)
    partial.replace(path)


async def _run(asset_path: Path, folder: Path, function: str) -> dict[str, Any]:
    import numpy as np
    from coreai.authoring import AIModelAsset
    from coreai.runtime import NDArray

    samples = sorted(folder.glob("inputs-*.npz"), key=lambda p: int(p.stem.split("-")[1]))
    seconds: list[float] = []
    async with AIModelAsset.load(asset_path).executable() as model:
        call = model.load_function(function)
        if call is None:
            raise SystemExit(f"the asset has no function {function!r} (it has {', '.join(model.function_names)})")
        desc = call.desc
        for index, sample in enumerate(samples):
            with np.load(sample) as data:
                feeds = {name: NDArray(np.ascontiguousarray(data[name].astype(desc.input_descriptor(name).dtype)))
                         for name in desc.input_names}
            started = time.perf_counter()
            outputs = await call(feeds)
            seconds.append(time.perf_counter() - started)
            arrays = {f"o{i}": np.asarray(outputs[name].numpy()) for i, name in enumerate(desc.output_names)}
            _write_atomic(folder / f"outputs-{index}.npz", lambda handle, arrays=arrays: np.savez(handle, **arrays))
        return {"output_names": list(desc.output_names), "input_names": list(desc.input_names),
                "seconds": seconds}


def main(argv: list[str]) -> None:
    asset_path, folder, function = Path(argv[0]), Path(argv[1]), argv[2]
    result = asyncio.run(_run(asset_path, folder, function))
    _write_atomic(folder / DONE, lambda handle: handle.write(json.dumps(result).encode()))


if __name__ == "__main__":  # pragma: no cover - run as a process (reference.run_reference)
    main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
