"""The `onnxruntime` target (pydantic only: validating a pipeline never imports onnx or onnxruntime).

```yaml
targets:
  - backend: onnxruntime
    precision: [float32, float16]
    providers: [cpu]            # cpu | cuda | coreml | tensorrt | dml | openvino | rocm | ...
    opset: 18                   # optional; default: the exporter's own
    graph_optimization: all     # disable | basic | extended | all
```

`precision` shapes the exported .onnx file; `providers` is chosen when the session is created, so
one export serves every provider.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from mlbench.config.base import Axis, TargetBase

PROVIDERS: dict[str, str] = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "dml": "DmlExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "migraphx": "MIGraphXExecutionProvider",
    "dnnl": "DnnlExecutionProvider",
    "qnn": "QNNExecutionProvider",
    "nnapi": "NnapiExecutionProvider",
    "xnnpack": "XnnpackExecutionProvider",
    "webgpu": "WebGpuExecutionProvider",
    "cann": "CANNExecutionProvider",
    "vitisai": "VitisAIExecutionProvider",
    "acl": "ACLExecutionProvider",
    "armnn": "ArmNNExecutionProvider",
    "rknpu": "RknpuExecutionProvider",
}
"""Short names a pipeline uses → ONNX Runtime's execution provider names (onnxruntime.get_all_providers())."""

ProviderName = Literal[
    "cpu", "cuda", "tensorrt", "coreml", "dml", "openvino", "rocm", "migraphx", "dnnl", "qnn", "nnapi",
    "xnnpack", "webgpu", "cann", "vitisai", "acl", "armnn", "rknpu",
]

GRAPH_OPTIMIZATION = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                      "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
"""`graph_optimization` → onnxruntime.GraphOptimizationLevel member."""

COREML_COMPUTE_UNITS = {"cpu_only": "CPUOnly", "cpu_and_gpu": "CPUAndGPU", "cpu_and_ne": "CPUAndNeuralEngine",
                        "all": "ALL"}
"""`coreml_compute_units` → the CoreML provider's `MLComputeUnits` option (same words as the coreml target)."""


def provider_device(ort_name: str) -> str:
    """Where a provider's nodes run, in the Placement vocabulary: CPU → cpu, CUDA → gpu, else its short name."""
    if ort_name == "CPUExecutionProvider":
        return "cpu"
    if ort_name == "CUDAExecutionProvider":
        return "gpu"
    for short, name in PROVIDERS.items():
        if name == ort_name:
            return short
    return ort_name.removesuffix("ExecutionProvider").lower()


class OnnxruntimeTarget(TargetBase):
    """ONNX Runtime: an .onnx file per precision (torch.onnx export), measured per execution provider."""

    backend: Literal["onnxruntime"] = Field(description="ONNX Runtime (torch.onnx export; measured on any OS).")
    precision: Axis[Literal["float32", "float16"]] = Field(
        default=["float32"],
        description="float16 converts the exported float32 graph (weights and ops) with "
        "onnxruntime.transformers.float16, keeping float32 inputs and outputs.",
    )
    providers: Axis[ProviderName] = Field(
        default=["cpu"],
        description="Execution providers, chosen when the session is created (one export serves all); one this "
        "machine's onnxruntime lacks is skipped, not failed. Nodes a provider cannot take run on the CPU provider.",
    )
    opset: int | None = Field(default=None, ge=7, description="ONNX opset to export; default: the exporter's own.")
    graph_optimization: Literal["disable", "basic", "extended", "all"] = Field(
        default="all", description="ONNX Runtime's graph optimization level when the session is created."
    )
    intra_op_threads: int | None = Field(
        default=None, ge=1, description="Intra-op threads of the session; default: ONNX Runtime's own (physical cores)."
    )
    coreml_compute_units: Literal["cpu_only", "cpu_and_gpu", "cpu_and_ne", "all"] | None = Field(
        default=None, description="The CoreML provider's MLComputeUnits (only with providers: coreml); default: ALL."
    )
    profile_runs: int = Field(
        default=10, ge=1, le=1000,
        description="Runs of a separate, profiled session that give placement and per-operator time "
        "(after the warmup runs; never part of the latency figures).",
    )

    file: Path | None = Field(
        default=None,
        description="An existing .onnx file (relative to this file) to measure as it is: no export; precision "
        "names its precision (one value). With several models, give it as an include entry.",
    )

    axes = ("precision", "providers")
    artifact_axes = ("precision",)

    def existing_artifact(self) -> tuple[str, Path] | None:
        return None if self.file is None else ("file", self.file)

    def check(self, config: Any) -> list[tuple[tuple[str | int, ...], str]]:
        if self.file is not None and len(self.precision) > 1:
            return [(("precision",), "an existing .onnx file has one precision: give one value")]
        if self.coreml_compute_units is not None and "coreml" not in self.providers:
            return [(("coreml_compute_units",), ("coreml_compute_units applies to the coreml provider only; "
                     "add coreml to providers or remove this key"))]
        return []
