"""Export a PyTorch module to a Core AI asset (``model.aimodel``), optionally float16 and compressed.

The path, as coreai-torch documents it: ``torch.export.export`` →
``run_decompositions(coreai_torch.get_decomp_table())`` → (float16: ``coreai_opt.casting.cast_fp32_to_fp16``)
→ ``TorchConverter().add_exported_program(ep, input_names=…, output_names=…).to_coreai()`` (an ``AIProgram``,
optimized as it is built) → the recipe's coreai-opt pass (``recipes``) → ``save_asset(Path)``: a folder holding
``main.mlirb`` (MLIR bytecode, ``coreai`` dialect, weights inside), ``main.hash`` and ``metadata.json``.

What the converter and the passes print or warn is captured and returned, one line each.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.backends.capture import captured, distinct_lines
from mlbench.backends.flexible import dynamic_shapes
from mlbench.errors import ReportableError, one_line

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from mlbench.config.models import ModelInput

EXPORT_PATH = "torch.export + coreai_torch.TorchConverter"
ASSET_NAME = "model.aimodel"
FLOAT16_CAST = "coreai_opt.casting.cast_fp32_to_fp16"
LOGGERS = ("coreai", "coreai_torch", "coreai_opt", "torch._export", "torch.export")


class CoreaiExportError(ReportableError):
    """The export failed: one line naming the step and the cause (an ATen op without a lowering, by name)."""


@dataclass
class CoreaiExportResult:
    artifact: Path
    export_path: str
    seconds: float
    fallback_reason: str | None = None
    float16_cast: str | None = None
    optimization: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)


def import_coreai() -> Any:
    """coreai_torch, imported quietly (it warns that it was validated up to torch 2.13)."""
    sink: list[str] = []
    with captured(sink, LOGGERS):
        import coreai_opt  # noqa: F401 - imported here so its own warnings are captured too
        import coreai_torch
    return coreai_torch


def unsupported_ops(message: str) -> list[str] | None:
    """The ATen ops coreai-torch names as having no lowering, if that is what `message` says."""
    match = re.search(r"unsupported ATen ops: (.+?)\. Use register_torch_lowering", message)
    return [op.strip() for op in match.group(1).split(",")] if match else None


def _fail(step: str, exc: BaseException) -> CoreaiExportError:
    ops = unsupported_ops(str(exc))
    if ops is not None:
        return CoreaiExportError(f"Core AI has no lowering for {', '.join(ops)} (coreai-torch "
                                 f"{_version('coreai-torch')}; register_torch_lowering() can add one)")
    return CoreaiExportError(f"{step} failed: {one_line(f'{type(exc).__name__}: {exc}')}")


def _version(package: str) -> str:
    from mlbench.machine import package_version

    return str(package_version(package))


def export_coreai(module: torch.nn.Module, example_inputs: list[torch.Tensor], input_names: list[str],
                  output_names: list[str], *, precision: str, optimization: dict[str, Any] | None,
                  dest: Path, calibration: list[list[torch.Tensor]] | None = None,
                  inputs: list[ModelInput] | None = None) -> CoreaiExportResult:
    """Convert `module` and save it as ``dest/model.aimodel``; CoreaiExportError (one line) when a step fails.
    `calibration` (input lists) feeds activation quantization; `inputs` (the pipeline's input specs) make
    their flexible dimensions dynamic (``backends.flexible.dynamic_shapes``: dimensions with the same bounds
    share one)."""
    import torch

    coreai_torch = import_coreai()
    started = time.perf_counter()
    sink: list[str] = []
    with captured(sink, LOGGERS, stdout=True):
        module = module.eval()
        if optimization is not None and optimization["kind"] == "linear_quantize_activations":
            from mlbench.backends.coreai.recipes import quantize_torch

            try:
                module = quantize_torch(module, example_inputs, calibration or [])
            except Exception as exc:  # noqa: BLE001
                raise _fail("coreai-opt Quantizer (W8A8)", exc) from None
        try:
            shapes = dynamic_shapes(inputs, module)
            program = torch.export.export(module, tuple(example_inputs), dynamic_shapes=shapes)
            program = program.run_decompositions(coreai_torch.get_decomp_table())
        except Exception as exc:  # noqa: BLE001 - one line per failure
            raise _fail("torch.export", exc) from None
        if precision == "float16":
            from coreai_opt.casting import cast_fp32_to_fp16

            try:
                program = cast_fp32_to_fp16(program)
            except Exception as exc:  # noqa: BLE001
                raise _fail(FLOAT16_CAST, exc) from None
        try:
            converter = coreai_torch.TorchConverter()
            converter.add_exported_program(program, input_names=list(input_names), output_names=list(output_names),
                                           state_names=state_names(program) or None)
            ai_program = converter.to_coreai()
        except Exception as exc:  # noqa: BLE001
            raise _fail("coreai_torch.TorchConverter", exc) from None
        if optimization is not None:
            from mlbench.backends.coreai.recipes import apply

            try:
                ai_program = apply(ai_program, optimization)
            except Exception as exc:  # noqa: BLE001
                raise _fail(f"coreai-opt {optimization.get('kind')}", exc) from None
        from mlbench.backends.coreai.shapes import specialize

        try:
            ai_program = specialize(ai_program, inputs)  # enumerated shapes: one static function each
        except Exception as exc:  # noqa: BLE001
            raise _fail("AIProgram.set_static_shape_config (enumerated shapes)", exc) from None
        artifact = Path(dest) / ASSET_NAME
        try:
            Path(dest).mkdir(parents=True, exist_ok=True)
            ai_program.save_asset(artifact)  # a Path: a str fails
        except Exception as exc:  # noqa: BLE001
            raise _fail("save_asset", exc) from None
    return CoreaiExportResult(artifact=artifact, export_path=EXPORT_PATH, seconds=time.perf_counter() - started,
                              float16_cast=FLOAT16_CAST if precision == "float16" else None,
                              optimization=optimization, warnings=clean_warnings(sink))


def state_names(program: Any) -> list[str]:
    """The states of an exported program in the converter's order (mutated buffers first, then mutated user
    inputs), named after the buffer or the input; empty when nothing is mutated."""
    from torch.export.graph_signature import InputKind

    signature = program.graph_signature
    mutated_buffers = set(signature.buffers_to_mutate.values())
    mutated_inputs = set(signature.user_inputs_to_mutate.values())
    buffers = [spec.target.replace(".", "_") for spec in signature.input_specs
               if spec.kind == InputKind.BUFFER and spec.target in mutated_buffers]
    inputs = [spec.arg.name for spec in signature.input_specs
              if spec.kind == InputKind.USER_INPUT and spec.arg.name in mutated_inputs]
    return buffers + inputs


def clean_warnings(messages: list[str]) -> list[str]:
    """What the converter and passes said, one line each, without the progress lines."""
    def shorten(message: str) -> str:
        text = one_line(message)
        return "" if text.startswith(("coreai-torch ", "ODIE ")) or "Converting" in text else text

    return distinct_lines(messages, shorten)


def warm() -> None:
    """A fresh export child's warmup: import Core AI quietly where it can run (else the export says why)."""
    from mlbench.backends.coreai.availability import unavailable

    if unavailable() is None:
        import_coreai()
