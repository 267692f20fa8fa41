"""Registration of the Core ML backend (see mlbench.plugins.registry)."""

from mlbench.backends.coreml.target import CoremlTarget, Recipe
from mlbench.plugins.spec import APPLE_DEVICES, CPU, GPU, BackendSpec, DeviceInfo, InspectCommand, MetricFamily

NEURAL_ENGINE = DeviceInfo(name="neural_engine", label="Neural Engine", short="ANE", color="#2e7d32", rank=10)

ESTIMATED_LATENCY = MetricFamily(
    prefix="latency.estimated.", placeholder="chip", unit="ms", label="≈ms {name}", better="lower", column=True,
    describe="Core ML latency estimated for that Apple chip by mlbench's roofline model (chip profile, placement, "
    "fitted efficiencies; docs/backends/coreml.md), never measured",
)

SPEC = BackendSpec(
    name="coreml",
    target=CoremlTarget,
    backend="mlbench.backends.coreml.backend:CoremlBackend",
    packages=("coremltools",),
    requires=(("coremltools", "coremltools"),),
    extra="coreml",
    warmup=("mlbench.backends.apple.coremltools_messages:import_coremltools",),  # quiet, and without scikit-learn
    devices=(NEURAL_ENGINE, GPU, CPU),
    recipes=Recipe,
    report_sections=("mlbench.backends.coreml.report:render_programs",),
    default_rules=("placement.neural_engine:-5pp",),
    metrics=(ESTIMATED_LATENCY,),
    inspect=InspectCommand(
        suffixes=(".mlpackage", ".mlmodel"),
        describe="a Core ML package (.mlpackage or .mlmodel)",
        configure="mlbench.backends.coreml.inspect:configure",
        run="mlbench.backends.coreml.inspect:run",
    ),
    rules="mlbench.backends.apple.compression_rules:apple_rule_table",
    commands=("mlbench.backends.coreml.calibrate_command:register", "mlbench.backends.coreml.devices_command:register"),
    deployment=APPLE_DEVICES,
    localize="mlbench.backends.coreml.localize.variant:localize_variant",
    order=1,
)
