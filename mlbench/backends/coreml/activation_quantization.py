"""W8A8 on any OS: coremltools' ``linear_quantize_activations`` with its calibration run by mlbench's
interpreter instead of Core ML.

coremltools (9.0, ``optimize/coreml/experimental/_post_training_quantization.py``) calibrates by
appending every intermediate tensor to the model's outputs and calling ``MLModel.predict``
(``_model_debugger.ModelDebugger.predict_intermediate_outputs``), which needs macOS. Here that one
method is replaced, for the duration of the call, by a run of the same program in the interpreter
(``emulate``), which hands back the same intermediate values; every other step (the statistics, the
quantize/dequantize pairs it inserts) is coremltools' own. On macOS coremltools predicts as usual.

The interpreter rounds float16 programs' intermediate values as Core ML's CPU does; the statistics
it gives are what the program computes, not what the Neural Engine would (EMULATION_NOTE).

coremltools 9.0 also inserts a float ``quantize`` before ops whose input is an integer tensor (an add
of position ids in a transformer), which fails ("scale has dtype fp32 whereas input ..."); such ops are
left out of the pass by name (``integer_op_names``).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["quantize_activations"]


@contextmanager
def _interpreter_predictions(mlmodel: Any) -> Any:
    """While active, coremltools' calibration predicts with mlbench's interpreter (off macOS only)."""
    if sys.platform == "darwin":  # pragma: no cover - Core ML predicts there
        yield
        return
    from coremltools.optimize.coreml.experimental import _model_debugger as debugger_module

    from mlbench.backends.coreml.emulate import Emulator
    from mlbench.backends.coreml.emulate.program import program_from_spec

    weights_root = Path(mlmodel.weights_dir).parent if getattr(mlmodel, "weights_dir", None) else None
    emulator = Emulator(program_from_spec(mlmodel.get_spec(), weights_root, Path("calibration")))
    original = debugger_module.ModelDebugger.predict_intermediate_outputs

    def predict(self: Any, inputs: dict[str, np.ndarray], intermediate_output_names: list[str],
                compute_units: Any = None) -> dict[str, np.ndarray]:
        return emulator.values(inputs, list(intermediate_output_names))

    debugger_module.ModelDebugger.predict_intermediate_outputs = predict
    try:
        yield
    finally:
        debugger_module.ModelDebugger.predict_intermediate_outputs = original


def integer_op_names(mlmodel: Any) -> list[str]:
    """Names of the ops whose `x` input is not floating point (integer adds of position ids, for example)."""
    from mlbench.backends.coreml.emulate.program import MIL_DTYPES

    dtypes: dict[str, str | None] = {}

    def dtype_of(value_type: Any) -> str | None:
        if value_type.WhichOneof("type") != "tensorType":
            return None
        return MIL_DTYPES.get(int(value_type.tensorType.dataType))

    names: list[str] = []

    def walk(block: Any) -> None:
        for op in block.operations:
            argument = op.inputs.get("x")
            source = argument.arguments[0].name if argument is not None and argument.arguments else None
            if source is not None and source in dtypes and dtypes[source] not in ("fp16", "fp32"):
                name = op.attributes.get("name")
                if name is not None:
                    names.append(name.immediateValue.tensor.strings.values[0])
            for out in op.outputs:
                dtypes[out.name] = dtype_of(out.type)
            for inner in op.blocks:
                walk(inner)

    for function in mlmodel.get_spec().mlProgram.functions.values():
        dtypes.update({i.name: dtype_of(i.type) for i in function.inputs})
        for block in function.block_specializations.values():
            walk(block)
    return names


def quantize_activations(ct: Any, mlmodel: Any, calibration: list[dict[str, np.ndarray]], weights: bool) -> Any:
    """The model with int8 activations (and int8 weights when ``weights``), calibrated on ``calibration``."""
    cto = ct.optimize.coreml
    if not calibration:
        raise ValueError("activation quantization needs calibration samples (the model's values or seeded inputs)")
    # coremltools 9.0 would put a float quantize before integer inputs too ("scale has dtype fp32 whereas
    # input ..."): those ops are left out by name
    config = cto.OptimizationConfig(
        global_config=cto.experimental.OpActivationLinearQuantizerConfig(mode="linear_symmetric"),
        op_name_configs=dict.fromkeys(integer_op_names(mlmodel)))
    with _interpreter_predictions(mlmodel):
        quantized = cto.experimental.linear_quantize_activations(mlmodel, config, calibration)
    if weights:
        weight_config = cto.OptimizationConfig(global_config=cto.OpLinearQuantizerConfig(mode="linear_symmetric"))
        quantized = cto.linear_quantize_weights(quantized, weight_config)
    return quantized
