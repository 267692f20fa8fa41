"""Registration of the ExecuTorch backend (see mlbench.backends.registry)."""

from mlbench.backends.executorch.target import ExecutorchTarget, XnnpackQuantizeRecipe
from mlbench.backends.spec import CPU, BackendSpec, DeviceInfo

XNNPACK = DeviceInfo(name="xnnpack", label="XNNPACK", short="XNN", color="#6a1b9a", rank=40)
COREML_DELEGATE = DeviceInfo(name="coreml", label="Core ML delegate", short="CML", color="#00838f", rank=30)
PORTABLE = DeviceInfo(name="portable", label="Portable kernels", short="PRT", color="#8d6e63", rank=95)

SPEC = BackendSpec(
    name="executorch",
    target=ExecutorchTarget,
    backend="mlbench.backends.executorch.backend:ExecutorchBackend",
    packages=("executorch",),
    devices=(XNNPACK, COREML_DELEGATE, PORTABLE, CPU),
    recipes=XnnpackQuantizeRecipe,
    report_sections=("mlbench.backends.executorch.report:render_op_times",),
    order=3,
)
