"""Registration of the LiteRT backend (see mlbench.plugins.registry).

Every LiteRT operation runs on the CPU, through the XNNPACK delegate or LiteRT's own reference kernels: its
placement says `cpu` for all of them (each op's `provider` names which), and the share XNNPACK took is a
figure of this backend's own, `delegated.xnnpack`, shown as a column where a model has it."""

from mlbench.backends.litert.target import LitertQuantizeRecipe, LitertTarget
from mlbench.plugins.spec import ANDROID, CPU, BackendSpec, MetricFamily

DELEGATED = MetricFamily(
    prefix="delegated.", placeholder="delegate", unit="ratio", label="{name} share of ops", better="higher", column=True,
    describe="share of the compute operations a LiteRT delegate took (the rest ran on LiteRT's reference CPU "
    "kernels), read from the interpreter's execution plan",
)

SPEC = BackendSpec(
    name="litert",
    target=LitertTarget,
    backend="mlbench.backends.litert.backend:LitertBackend",
    packages=("litert-torch", "ai-edge-litert", "ai-edge-quantizer"),
    warmup=("mlbench.backends.litert.export:warm",),
    devices=(CPU,),
    recipes=LitertQuantizeRecipe,
    metrics=(DELEGATED,),
    deployment=ANDROID,
    localize="mlbench.backends.litert.localize:localize_variant",
    order=3,
)
