"""Registration of the Core AI backend (see mlbench.plugins.registry)."""

from mlbench.backends.coreai.target import CoreaiTarget
from mlbench.plugins.spec import APPLE_DEVICES, BackendSpec, InspectCommand

SPEC = BackendSpec(
    name="coreai",
    target=CoreaiTarget,
    backend="mlbench.backends.coreai.backend:CoreaiBackend",
    packages=("coreai-core", "coreai-torch", "coreai-opt"),
    warmup=("mlbench.backends.coreai.export:warm",),  # quiet, and only where the wheels exist
    report_sections=("mlbench.backends.coreai.report:render_assets",),
    inspect=InspectCommand(
        suffixes=(".aimodel",),
        describe="a Core AI asset (.aimodel)",
        configure="mlbench.backends.coreai.inspect:configure",
        run="mlbench.backends.coreai.inspect:run",
    ),
    deployment=APPLE_DEVICES,
    localize_missing="not built yet: Core AI's op origins are read (backends/coreai/ir.py), but mlbench's reference "
                     "child returns only the program's outputs",
    order=3,
)
