"""Registration of the ONNX Runtime backend (see mlbench.plugins.registry)."""

from mlbench.backends.onnxruntime.target import OnnxruntimeTarget
from mlbench.plugins.spec import CPU, GPU, SERVER_CPU, BackendSpec

SPEC = BackendSpec(
    name="onnxruntime",
    target=OnnxruntimeTarget,
    backend="mlbench.backends.onnxruntime.backend:OnnxruntimeBackend",
    packages=("onnx", "onnxruntime"),
    requires=(("onnx", "onnx"), ("onnxruntime", "onnxruntime")),
    extra="onnxruntime",
    devices=(GPU, CPU),
    report_sections=("mlbench.backends.onnxruntime.report:render_op_times",),
    deployment=SERVER_CPU,
    localize="mlbench.backends.onnxruntime.localize:localize_variant",
    order=2,
)
