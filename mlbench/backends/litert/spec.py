"""Registration of the LiteRT backend (see mlbench.backends.registry)."""

from mlbench.backends.litert.target import LitertQuantizeRecipe, LitertTarget
from mlbench.backends.spec import CPU, BackendSpec, DeviceInfo

XNNPACK = DeviceInfo(name="xnnpack", label="XNNPACK", short="XNN", color="#6a1b9a", rank=40)

SPEC = BackendSpec(
    name="litert",
    target=LitertTarget,
    backend="mlbench.backends.litert.backend:LitertBackend",
    packages=("litert-torch", "ai-edge-litert", "ai-edge-quantizer"),
    warmup=("mlbench.backends.litert.export:warm",),
    devices=(XNNPACK, CPU),
    recipes=LitertQuantizeRecipe,
    order=3,
)
