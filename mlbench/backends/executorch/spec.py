"""Registration of the ExecuTorch backend (see mlbench.plugins.registry)."""

from mlbench.backends.executorch.target import ExecutorchTarget, XnnpackQuantizeRecipe
from mlbench.plugins.spec import ANDROID, APPLE_DEVICES, BackendSpec, MetricFamily

# Placements name the devices `xnnpack` and `coreml` (the delegates) and `cpu` (portable kernels). The
# delegates are not registered as devices: every report's share columns list every registered device, and
# the delegated share has its own lines in this backend's report section.

EMBEDDED_SHARE = MetricFamily(
    prefix="coreml_delegate.", placeholder="device", unit="ratio", label="Core ML delegate {name}",
    describe="estimated share of the cost of the Core ML programs the ExecuTorch Core ML delegate embeds, per Core "
    "ML device (mlbench's placement rules, compute units all), weighted across partitions by FLOPs",
)

SPEC = BackendSpec(
    name="executorch",
    target=ExecutorchTarget,
    backend="mlbench.backends.executorch.backend:ExecutorchBackend",
    packages=("executorch",),
    requires=(("executorch", "executorch"),),
    extra="executorch",
    warmup=("mlbench.backends.executorch.export:require_executorch",),  # quiet, and what the exports import
    recipes=XnnpackQuantizeRecipe,
    report_sections=("mlbench.backends.executorch.report:render_op_times",),
    metrics=(EMBEDDED_SHARE,),
    deployment=ANDROID,  # XNNPACK and the portable kernels: a phone's CPU
    deployment_by_axis=("delegate", {"coreml": APPLE_DEVICES}),
    localize="mlbench.backends.executorch.localize:localize_variant",
    order=5,
)
