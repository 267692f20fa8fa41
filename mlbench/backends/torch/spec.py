"""Registration of the eager PyTorch backend (see mlbench.backends.registry)."""

from mlbench.backends.spec import BackendSpec
from mlbench.backends.torch.target import TorchTarget

SPEC = BackendSpec(
    name="torch",
    target=TorchTarget,
    backend="mlbench.backends.torch.backend:TorchBackend",
    packages=("torch", "torchvision"),
    requires=(("torch", "torch"),),
    extra="torch",
    order=0,
)
