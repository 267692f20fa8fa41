"""Several entry points, and KV-cache-like state, in one Core AI asset.

Each `FunctionSpec` is exported with ``torch.export`` and staged on one ``coreai_torch.TorchConverter`` with
``add_exported_program(…, entrypoint_name=name, state_names=…)``; ``to_coreai()`` then builds one program whose
functions share the asset (and its weights). A registered buffer that ``forward`` mutates in place (a KV cache)
becomes a state of its function, named after the buffer (dots become underscores); the reference runtime takes
it per call (``reference.run_reference(…, states=…)``) and updates it in place, as Core AI does on a device.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mlbench.backends.capture import captured
from mlbench.backends.coreai.export import (
    ASSET_NAME,
    EXPORT_PATH,
    LOGGERS,
    CoreaiExportError,
    CoreaiExportResult,
    _fail,
    clean_warnings,
    import_coreai,
    state_names,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclass
class FunctionSpec:
    """One entry point of an asset: `module` called with `example_inputs` (names in order)."""

    name: str
    module: torch.nn.Module
    example_inputs: list[torch.Tensor]
    input_names: list[str]
    output_names: list[str]


def export_functions(functions: list[FunctionSpec], dest: Path) -> CoreaiExportResult:
    """Convert every function into one asset ``dest/model.aimodel`` (float32, no recipe); CoreaiExportError
    (one line naming the function and the step) when one fails."""
    import torch

    if not functions:
        raise CoreaiExportError("no function to export")
    names = [spec.name for spec in functions]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise CoreaiExportError(f"function names must be distinct: {', '.join(repeated)} given more than once")
    coreai_torch = import_coreai()
    started = time.perf_counter()
    sink: list[str] = []
    with captured(sink, LOGGERS, stdout=True):
        converter = coreai_torch.TorchConverter()
        for spec in functions:
            try:
                program = torch.export.export(spec.module.eval(), tuple(spec.example_inputs))
                program = program.run_decompositions(coreai_torch.get_decomp_table())
            except Exception as exc:  # noqa: BLE001 - one line per failure
                raise _fail(f"torch.export of function {spec.name!r}", exc) from None
            try:
                converter.add_exported_program(program, input_names=list(spec.input_names),
                                               output_names=list(spec.output_names),
                                               state_names=state_names(program) or None, entrypoint_name=spec.name)
            except Exception as exc:  # noqa: BLE001
                raise _fail(f"coreai_torch.TorchConverter (function {spec.name!r})", exc) from None
        try:
            ai_program = converter.to_coreai()
        except Exception as exc:  # noqa: BLE001
            raise _fail("coreai_torch.TorchConverter", exc) from None
        artifact = Path(dest) / ASSET_NAME
        try:
            Path(dest).mkdir(parents=True, exist_ok=True)
            ai_program.save_asset(artifact)
        except Exception as exc:  # noqa: BLE001
            raise _fail("save_asset", exc) from None
    return CoreaiExportResult(artifact=artifact, export_path=EXPORT_PATH, seconds=time.perf_counter() - started,
                              warnings=clean_warnings(sink))
