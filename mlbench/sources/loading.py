"""Model sources: build a PyTorch model from a pipeline entry, under the pipeline's seed.

Sources: `torchvision:NAME`, `pkg.module:factory`, `path/to/file.py:Factory` (relative to the
pipeline file). A factory is called with the entry's kwargs; an nn.Module instance is used as is.
torch is imported here, never on the validate path.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

    from mlbench.config.pipeline import ModelSpec

_TORCH_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
                 "int64": "int64", "int32": "int32", "bool": "bool"}


class ModelLoadError(Exception):
    """The model could not be built: recorded as the failure of each of its variants."""


@dataclass
class LoadedModel:
    """A model ready to export and measure: eval mode, float32, CPU, with its seeded inputs."""

    spec: ModelSpec
    module: torch.nn.Module
    example_inputs: list[torch.Tensor]
    reference: list[tuple[str, np.ndarray]]  # eager float32 CPU outputs, flattened and named
    seed: int = 0
    _digest: str | None = field(default=None, repr=False)
    _samples: dict[int, tuple[list[torch.Tensor], list[tuple[str, np.ndarray]]]] = field(
        default_factory=dict, repr=False)

    def sample(self, index: int) -> tuple[list[torch.Tensor], list[tuple[str, np.ndarray]]]:
        """Seeded input set `index` and eager float32's outputs for it; 0 is the example inputs.

        Sample k draws its inputs under seed + k, so every backend and every run sees the same sets.
        """
        if index == 0:
            return self.example_inputs, self.reference
        if index not in self._samples:
            import torch

            inputs = make_inputs(self.spec, self.seed + index)
            with torch.inference_mode():
                output = self.module(*inputs)
            self._samples[index] = (inputs, [(name, t.detach().float().cpu().numpy())
                                             for name, t in flatten_outputs(output)])
        return self._samples[index]

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.spec.inputs]

    @property
    def digest(self) -> str:
        """sha256 of the model's code, structure, weights and inputs: what an export depends on."""
        if self._digest is None:
            self._digest = module_digest(self.module, self.example_inputs)
        return self._digest


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy comes with torch
        pass


def resolve_factory(source: str, base_dir: Path) -> Any:
    """The object a source string names. Raises ModelLoadError with a one-line reason."""
    kind, _, attr = source.rpartition(":")
    if kind == "torchvision":
        try:
            import torchvision.models as tvm
        except ImportError as exc:
            raise ModelLoadError(f"torchvision is not installed: {exc}") from exc
        if attr not in tvm.list_models():
            raise ModelLoadError(f"torchvision has no model '{attr}'")
        return lambda **kwargs: tvm.get_model(attr, **kwargs)
    if kind.endswith(".py"):
        path = (base_dir / kind).resolve()
        if not path.is_file():
            raise ModelLoadError(f"model file not found: {path}")
        name = "mlbench_user_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[name]
                raise ModelLoadError(f"cannot import {path.name}: {type(exc).__name__}: {exc}") from exc
    else:
        try:
            module = importlib.import_module(kind)
        except Exception as exc:
            raise ModelLoadError(f"cannot import '{kind}': {type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ModelLoadError(f"'{kind}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    return obj


def make_inputs(spec: ModelSpec, seed: int) -> list[torch.Tensor]:
    """Seeded example inputs: normal floats, small non-negative integers, random booleans."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    tensors = []
    for item in spec.inputs:
        dtype = getattr(torch, _TORCH_DTYPES[item.dtype])
        if dtype.is_floating_point:
            tensors.append(torch.randn(item.shape, generator=generator).to(dtype))
        elif dtype == torch.bool:
            tensors.append(torch.randint(0, 2, item.shape, generator=generator).bool())
        else:
            tensors.append(torch.randint(0, 10, item.shape, generator=generator, dtype=dtype))
    return tensors


def flatten_outputs(output: Any, prefix: str = "output") -> list[tuple[str, Any]]:
    """Named tensors from a tensor, tuple, list, dict or namedtuple, in a stable order."""
    import torch

    if isinstance(output, torch.Tensor):
        return [(prefix, output)]
    if isinstance(output, dict):
        return [item for key in output for item in flatten_outputs(output[key], f"{prefix}.{key}")]
    if isinstance(output, (list, tuple)):
        return [item for i, value in enumerate(output) for item in flatten_outputs(value, f"{prefix}.{i}")]
    raise ModelLoadError(f"model output of type {type(output).__name__} is not a tensor, tuple, list or dict")


def load_model(spec: ModelSpec, seed: int, base_dir: Path) -> LoadedModel:
    """Build the model under the seed, check it runs on its inputs, and keep its float32 outputs."""
    import torch

    factory = resolve_factory(spec.source, base_dir)
    seed_everything(seed)
    if isinstance(factory, torch.nn.Module):
        if spec.kwargs:
            raise ModelLoadError(f"'{spec.source}' is a module instance; it takes no kwargs")
        module = factory
    elif callable(factory):
        try:
            module = factory(**spec.kwargs)
        except Exception as exc:
            raise ModelLoadError(f"building '{spec.source}' failed: {type(exc).__name__}: {exc}") from exc
    else:
        raise ModelLoadError(f"'{spec.source}' is neither a factory nor an nn.Module")
    if not isinstance(module, torch.nn.Module):
        raise ModelLoadError(f"'{spec.source}' returned {type(module).__name__}, not a torch.nn.Module")
    module = module.float().eval()
    inputs = make_inputs(spec, seed)
    try:
        with torch.inference_mode():
            output = module(*inputs)
    except Exception as exc:
        shapes = ", ".join(f"{i.name}{list(i.shape)}" for i in spec.inputs)
        raise ModelLoadError(f"model does not run on its inputs ({shapes}): {_first_line(exc)}") from exc
    reference = [(name, t.detach().float().cpu().numpy()) for name, t in flatten_outputs(output)]
    return LoadedModel(spec=spec, module=module, example_inputs=inputs, reference=reference, seed=seed)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def module_digest(module: torch.nn.Module, inputs: list[torch.Tensor]) -> str:
    """sha256 over the source of every module class used, the module tree, weights and inputs.

    The class sources catch an edited forward(); the state dict catches new weights; the input
    shapes and dtypes catch a re-specified input. Tool versions enter the artifact key apart.
    """
    import torch

    digest = hashlib.sha256()
    classes = sorted({type(m) for m in module.modules()}, key=lambda c: f"{c.__module__}.{c.__qualname__}")
    for cls in classes:
        digest.update(f"{cls.__module__}.{cls.__qualname__}\n".encode())
        try:
            digest.update(inspect.getsource(cls).encode())
        except (OSError, TypeError):
            pass
    digest.update(repr(module).encode())
    for name, tensor in module.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{list(t.shape)}\n".encode())
        digest.update(t.reshape(-1).view(dtype=torch.uint8).numpy().tobytes() if t.numel() else b"")
    for tensor in inputs:
        digest.update(f"input:{tensor.dtype}:{list(tensor.shape)}\n".encode())
    return digest.hexdigest()
