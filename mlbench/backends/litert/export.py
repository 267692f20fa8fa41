"""Export a PyTorch module to one ``.tflite`` file with litert-torch, then quantize it with ai-edge-quantizer.

1. ``litert_torch.convert(module, example_inputs)`` (torch.export, then the LiteRT converter) gives the
   float32 flatbuffer, one signature ``serving_default`` whose inputs are the module's positional
   arguments in order, in the module's own layout (NCHW stays NCHW: the converter inserts the
   TRANSPOSEs XNNPACK needs inside the graph);
2. ``precision: float16``: ``ai_edge_quantizer.Quantizer`` with a weight-only FLOAT_CASTING recipe of 16
   bits (float16 weights, dequantized to float32 at load; computation stays float32);
3. an ``optimize`` recipe: ``ai_edge_quantizer.recipe`` — ``dynamic_wi8_afp32`` (dynamic_int8),
   ``weight_only_wi8_afp32`` (weight_only_int8), ``weight_only_wi4_afp32`` (weight_only_int4), or
   ``static_wi8_ai8`` (full_int8) calibrated with ``Quantizer.calibrate`` on the given input sets.

The converter's console output is silenced and its warnings returned, shortened and deduplicated.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.backends.capture import captured, distinct_lines, quiet_native_stderr
from mlbench.errors import ReportableError, first_line

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

EXPORT_PATH = "litert_torch.convert"
FLOAT16_CONVERSION = "ai_edge_quantizer weight_only FLOAT_CASTING 16 bits"
RECIPE_API = {
    "dynamic_int8": "ai_edge_quantizer.recipe.dynamic_wi8_afp32",
    "weight_only_int8": "ai_edge_quantizer.recipe.weight_only_wi8_afp32",
    "weight_only_int4": "ai_edge_quantizer.recipe.weight_only_wi4_afp32",
    "full_int8": "ai_edge_quantizer.recipe.static_wi8_ai8 + Quantizer.calibrate",
}
MODEL_NAME = "model.tflite"
SIGNATURE = "serving_default"
MAX_MESSAGE_CHARS = 200
LOGGERS = ["litert_torch", "ai_edge_quantizer", "torch", "absl", "jax"]


class LitertExportError(ReportableError):
    """The converter or the quantizer failed: the message names the step and the error's first line."""


@dataclass
class LitertExportResult:
    artifact: Path
    export_path: str
    fallback_reason: str | None
    seconds: float
    quantization: str | None = None
    calibration_samples: int | None = None
    warnings: list[str] = field(default_factory=list)


@contextlib.contextmanager
def _quiet(sink: list[str]) -> Iterator[None]:
    with quiet_native_stderr(), captured(sink, LOGGERS, stdout=True):
        yield


def _convert(module: torch.nn.Module, args: tuple, sink: list[str]) -> bytes:
    import torch

    with _quiet(sink), torch.no_grad():
        import litert_torch  # its first import logs natively (absl, oneDNN) and through torch's loggers

        edge_model = litert_torch.convert(module.eval(), args)
        return bytes(edge_model.model_content())


def _recipe(scheme: str) -> Any:
    from ai_edge_quantizer import recipe

    return {"dynamic_int8": recipe.dynamic_wi8_afp32, "weight_only_int8": recipe.weight_only_wi8_afp32,
            "weight_only_int4": recipe.weight_only_wi4_afp32, "full_int8": recipe.static_wi8_ai8}[scheme]()


def _float16_recipe() -> Any:
    from ai_edge_quantizer import algorithm_manager, qtyping, recipe_manager

    manager = recipe_manager.RecipeManager()
    manager.add_weight_only_config(regex=".*", operation_name=qtyping.TFLOperationName.ALL_SUPPORTED, num_bits=16,
                                   algorithm_key=algorithm_manager.AlgorithmName.FLOAT_CASTING)
    return manager.get_quantization_recipe()


def _quantize(flatbuffer: bytes, recipe: Any, calibration: list[dict[str, np.ndarray]] | None,
              sink: list[str]) -> bytes:
    from ai_edge_quantizer import quantizer

    with _quiet(sink):
        q = quantizer.Quantizer(bytearray(flatbuffer), recipe)
        result = None
        if q.need_calibration:
            result = q.calibrate({SIGNATURE: calibration or []}, num_threads=1)
        quantized = q.quantize(result, enable_progress_report=False).quantized_model
    return bytes(quantized)


def signature_inputs(flatbuffer: bytes | Path) -> list[tuple[str, Any]]:
    """(name, dtype) of the serving signature's inputs, in the module's argument order (int64 inputs are int32:
    the converter narrows 64-bit types)."""
    from ai_edge_litert.interpreter import Interpreter

    content = flatbuffer.read_bytes() if isinstance(flatbuffer, Path) else flatbuffer
    with quiet_native_stderr():
        interpreter = Interpreter(model_content=content)
    details = interpreter.get_signature_runner(SIGNATURE).get_input_details()
    return [(name, details[name]["dtype"]) for name in interpreter.get_signature_list()[SIGNATURE]["inputs"]]


def export_tflite(
    module: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    *,
    precision: str,
    scheme: str | None,
    dest: Path,
    calibration: list[list[np.ndarray]] | None = None,
) -> LitertExportResult:
    """Write ``dest/model.tflite``; raise LitertExportError (one line) when the converter or quantizer fails.

    ``calibration``: input sets (arrays in the module's argument order) for full_int8."""
    if precision not in ("float32", "float16"):
        raise ValueError(f"unsupported precision {precision!r}")
    if scheme is not None and scheme not in RECIPE_API:
        raise ValueError(f"unsupported quantization scheme {scheme!r}")
    messages: list[str] = []
    t0 = time.perf_counter()
    try:
        flatbuffer = _convert(module, tuple(example_inputs), messages)
    except Exception as exc:  # noqa: BLE001 - every converter error is reported on one line
        raise LitertExportError(f"LiteRT export failed: {EXPORT_PATH}: {first_line(exc, MAX_MESSAGE_CHARS, cause=True)}") from None
    quantization = None
    used = None
    try:
        if precision == "float16":
            flatbuffer = _quantize(flatbuffer, _float16_recipe(), None, messages)
            quantization = FLOAT16_CONVERSION
        if scheme is not None:
            feeds = None
            if scheme == "full_int8":
                if not calibration:
                    raise ValueError("full_int8 needs calibration samples (the model's values or seeded inputs)")
                names = signature_inputs(flatbuffer)
                feeds = [{name: array.astype(dtype, copy=False) for (name, dtype), array in zip(names, sample)}
                         for sample in calibration]
                used = len(feeds)
            flatbuffer = _quantize(flatbuffer, _recipe(scheme), feeds, messages)
            quantization = RECIPE_API[scheme]
    except Exception as exc:  # noqa: BLE001 - every quantizer error is reported on one line
        raise LitertExportError(f"LiteRT quantization ({scheme or precision}) failed: {first_line(exc, MAX_MESSAGE_CHARS, cause=True)}") from None
    path = dest / MODEL_NAME
    path.write_bytes(flatbuffer)
    return LitertExportResult(artifact=path, export_path=EXPORT_PATH, fallback_reason=None,
                              seconds=time.perf_counter() - t0, quantization=quantization, calibration_samples=used,
                              warnings=distinct_lines(messages, first_line))


def warm() -> None:
    """Import the converter and the quantizer quietly (a fresh export child's warmup)."""
    with _quiet([]):
        import ai_edge_quantizer.quantizer  # noqa: F401
        import litert_torch  # noqa: F401
