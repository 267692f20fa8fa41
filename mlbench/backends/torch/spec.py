"""Registration of the eager PyTorch backend (see mlbench.plugins.registry)."""

from mlbench.backends.torch.target import TorchTarget
from mlbench.plugins.spec import SERVER_CPU, BackendSpec

SPEC = BackendSpec(
    name="torch",
    target=TorchTarget,
    backend="mlbench.backends.torch.backend:TorchBackend",
    packages=("torch", "torchvision"),
    requires=(("torch", "torch"),),
    extra="torch",
    deployment=SERVER_CPU,
    localize_missing="eager PyTorch is the reference every other backend is localized against",
    order=0,
)
