"""Model sources: build a PyTorch model from a pipeline entry, under the pipeline's seed.

Sources: `torchvision:NAME`, `pkg.module:factory`, `path/to/file.py:Factory` (relative to the
pipeline file); `transformers:ClassName` (``huggingface``); saved files and folders (``saved``).
A factory is called with the entry's kwargs; an nn.Module instance is used as is. Models that take
their inputs by name or return nested outputs are wrapped (``binding``) so every exporter sees
forward(*tensors) -> tuple. A model without a source (only existing artifacts are measured) has no
module and no reference outputs. Inputs: ``inputs``. torch is imported here, never on the validate path.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.errors import first_line, frame_place, user_frame
from mlbench.sources.errors import ModelLoadError
from mlbench.sources.inputs import InputMaker
from mlbench.store.hashing import sha256_file

if TYPE_CHECKING:
    import numpy as np
    import torch

    from mlbench.config.models import ModelSpec


__all__ = ["LoadedModel", "ModelLoadError", "flatten_outputs", "load_model", "make_inputs", "module_digest"]


def flatten_outputs(output: Any, prefix: str = "output") -> list[tuple[str, Any]]:
    """Named tensors from a tensor, tuple, list, dict or namedtuple (see ``binding``)."""
    from mlbench.sources.binding import flatten_outputs as flatten

    return flatten(output, prefix)


@dataclass
class LoadedModel:
    """A model ready to export and measure: eval mode, float32, CPU, with its seeded inputs.

    `module` is None for a model without a source; then `reference` is empty and `has_source` False.
    """

    spec: ModelSpec
    module: torch.nn.Module | None
    example_inputs: list[torch.Tensor]
    reference: list[tuple[str, np.ndarray]]  # eager float32 CPU outputs, flattened and named
    seed: int = 0
    maker: InputMaker | None = field(default=None, repr=False)
    source_digest: str | None = field(default=None, repr=False)  # a saved file's bytes, when there is one
    build_digest: str | None = field(default=None, repr=False)  # what the pipeline says builds it (`build_digest`)
    _digest: str | None = field(default=None, repr=False)
    _samples: dict[tuple[int, int], tuple[list[torch.Tensor], list[tuple[str, np.ndarray]]]] = field(
        default_factory=dict, repr=False)
    generations: dict[tuple[int, int], Any] = field(default_factory=dict, repr=False)
    """Eager float32's greedy generations of a generative model, by (prompt length, new tokens), made once
    and shared by every backend's verification (`mlbench.generate.reference`)."""

    @property
    def has_source(self) -> bool:
        return self.module is not None

    @property
    def torch_module(self) -> torch.nn.Module:
        """The module to export or run; ModelLoadError for a model without a source."""
        if self.module is None:
            raise ModelLoadError(f"model '{self.spec.name}' has no source: there is nothing to export or run")
        return self.module

    def sample(self, index: int, alternative: int = 0) -> tuple[list[torch.Tensor], list[tuple[str, np.ndarray]]]:
        """Seeded input set `index` at shape alternative `alternative`, and eager float32's outputs for it
        (empty without a source); (0, 0) is the example inputs.

        Sample k draws its inputs under seed + k, so every backend and every run sees the same sets.
        """
        if index == 0 and alternative == 0:
            return self.example_inputs, self.reference
        key = (index, alternative)
        if key not in self._samples:
            maker = self.maker or InputMaker(self.spec, self.seed)
            inputs = maker.make(index, alternative)
            self._samples[key] = (inputs, self.run_reference(inputs))
        return self._samples[key]

    def run_reference(self, inputs: list[torch.Tensor]) -> list[tuple[str, np.ndarray]]:
        """Eager float32's named outputs for `inputs` ([] without a source)."""
        if self.module is None:
            return []
        import torch

        with torch.inference_mode():
            output = self.module(*inputs)
        names = [name for name, _ in self.reference]
        flat = flatten_outputs(output)
        return [(names[i] if i < len(names) else name, t.detach().float().cpu().numpy())
                for i, (name, t) in enumerate(flat)]

    def alternative(self, shape_label: str | None) -> int:
        """The shape alternative a variant's `shape` axis value names (0 when it has none)."""
        labels = self.spec.shape_labels()
        return labels.index(shape_label) if shape_label in labels else 0

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.spec.inputs]

    @property
    def digest(self) -> str:
        """sha256 of the model's code, structure, weights and inputs, and of what built it (source, kwargs,
        the factory's file): what an export depends on."""
        if self._digest is None:
            extra = "\n".join(d for d in (self.source_digest, self.build_digest) if d is not None) or None
            self._digest = module_digest(self.torch_module, self.example_inputs, extra=extra)
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
            except Exception as exc:  # a user's module runs here: anything it raises becomes one line
                del sys.modules[name]
                raise ModelLoadError(f"cannot import {path.name}: {_at(exc, base_dir)}{type(exc).__name__}: "
                                     f"{exc}") from exc
    else:
        try:
            module = importlib.import_module(kind)
        except Exception as exc:  # a user's module runs here: anything it raises becomes one line
            raise ModelLoadError(f"cannot import '{kind}': {_at(exc, base_dir)}{type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ModelLoadError(f"'{kind}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    return obj


_UNEXPECTED_KEYWORD = re.compile(r"(?P<callee>[A-Za-z_][\w.]*)\(\) got an unexpected keyword argument '(?P<key>\w+)'")


def keyword_hint(exc: BaseException) -> str:
    """`; did you mean 'num_classes'?` for a TypeError naming a keyword its callee lacks, from the callee's
    signature (the run may import what validate may not: a torchvision model's class, a factory's `**kwargs`
    passed on), or ''."""
    from mlbench.config.base import suggest

    found = _UNEXPECTED_KEYWORD.match(str(exc)) if isinstance(exc, TypeError) else None
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if found is None or tb is None:
        return ""
    head, *rest = found["callee"].split(".")
    callee = tb.tb_frame.f_locals.get(head, tb.tb_frame.f_globals.get(head))  # where the call was written
    for part in rest:
        callee = getattr(callee, part, None)
    try:
        parameters = inspect.signature(callee).parameters.values()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]
    return suggest(found["key"], names)


def _at(exc: BaseException, base_dir: Path) -> str:
    """`models.py:41 in forward: ` where the user's code raised `exc`, or '' when none of its frames is theirs."""
    frame = user_frame(exc)
    return f"{frame_place(frame, base_dir)}: " if frame is not None else ""


def make_inputs(spec: ModelSpec, seed: int, base_dir: Path | None = None) -> list[torch.Tensor]:
    """Seeded example inputs (input set 0 at the first shape alternative); see ``inputs``."""
    return InputMaker(spec, seed, base_dir).make(0, 0)


def build_module(spec: ModelSpec, base_dir: Path) -> tuple[Any, str | None]:
    """(the nn.Module a source names, the sha256 of its saved file or None). Raises ModelLoadError."""
    kind = spec.source_kind
    assert spec.source is not None
    if kind == "transformers":
        from mlbench.sources.huggingface import from_config

        return from_config(spec.source.partition(":")[2], spec.kwargs), None
    if kind == "saved":
        from mlbench.sources.saved import file_digest, load_saved

        path = (base_dir / spec.source).resolve()
        module = load_saved(path, spec.kwargs)
        return module, file_digest(path)
    factory = resolve_factory(spec.source, base_dir)
    import torch

    if isinstance(factory, torch.nn.Module):
        if spec.kwargs:
            raise ModelLoadError(f"'{spec.source}' is a module instance; it takes no kwargs")
        return factory, None
    if callable(factory):
        try:
            return factory(**spec.kwargs), None
        except Exception as exc:  # a user's factory runs here: anything it raises becomes one line
            raise ModelLoadError(f"building '{spec.source}' failed: {_at(exc, base_dir)}{type(exc).__name__}: "
                                 f"{exc}{keyword_hint(exc)}") from exc
    raise ModelLoadError(f"'{spec.source}' is neither a factory nor an nn.Module")


def load_model(spec: ModelSpec, seed: int, base_dir: Path) -> LoadedModel:
    """Build the model under the seed, check it runs on its inputs, and keep its float32 outputs."""
    import torch

    from mlbench.sources.binding import BoundModule, needs_binding

    try:
        maker = InputMaker(spec, seed, base_dir)
    except ValueError as exc:  # a values file that changed since validation
        raise ModelLoadError(str(exc)) from exc
    inputs = maker.make(0, 0)
    if spec.source is None:
        return LoadedModel(spec=spec, module=None, example_inputs=inputs, reference=[], seed=seed, maker=maker)
    seed_everything(seed)
    module, source_digest = build_module(spec, base_dir)
    built_by = build_digest(spec, base_dir)
    if not isinstance(module, torch.nn.Module):
        raise ModelLoadError(f"'{spec.source}' returned {type(module).__name__}, not a torch.nn.Module")
    if not isinstance(module, torch.jit.ScriptModule):
        module = module.float()
    module = module.eval()
    names = [i.name for i in spec.inputs]
    # a generative model's forward pass without its cache: the cache is the backends' (mlbench.generate)
    options = {"use_cache": False} if spec.generate is not None and spec.keyword_inputs else {}
    try:
        with torch.inference_mode():
            output = module(**dict(zip(names, inputs)), **options) if spec.keyword_inputs else module(*inputs)
    except Exception as exc:  # a user's model runs here: anything it raises becomes one line
        shapes = ", ".join(f"{i.name}{i.default_shape}" for i in spec.inputs)
        raise ModelLoadError(f"model does not run on its inputs ({shapes}): "
                             f"{_at(exc, base_dir)}{first_line(exc, 1000)}") from exc
    reference = [(name, t.detach().float().cpu().numpy()) for name, t in flatten_outputs(output)]
    if needs_binding(output, spec.keyword_inputs):
        module = BoundModule(module, names if spec.keyword_inputs else None, options).eval()
    return LoadedModel(spec=spec, module=module, example_inputs=inputs, reference=reference, seed=seed,
                       maker=maker, source_digest=source_digest, build_digest=built_by)


def build_digest(spec: ModelSpec, base_dir: Path) -> str:
    """sha256 of what the pipeline says builds the model: the source (a file source by its bytes and the name in
    it, so the same file reached by another relative path is the same model), the kwargs given to the factory,
    the binding, and the file the factory lives in. A kwarg the module keeps as a plain attribute (no weight,
    no repr) changes nothing else the digest sees, so it must enter here."""
    from mlbench.store.hashing import sha256_json

    source: Any = spec.source
    kind = spec.source_kind
    if kind in ("file", "module"):
        where, _, attr = str(spec.source).rpartition(":")
        source = {"kind": kind, "attr": attr, "file": _factory_file_sha256(kind, where, base_dir)}
        if kind == "module":
            source["module"] = where
    return sha256_json({"source": source, "kwargs": spec.model_dump(mode="json")["kwargs"], "bind": spec.bind})


def _factory_file_sha256(kind: str, where: str, base_dir: Path) -> str:
    """sha256 of the file a `file.py:attr` or `pkg.module:attr` source names ('' when it has none)."""
    if kind == "file":
        path: str | Path | None = (base_dir / where).resolve()
    else:
        module = sys.modules.get(where)
        path = getattr(module, "__file__", None)
    try:
        return sha256_file(path) if path else ""
    except OSError:
        return ""


def _source_file_sha256(cls: type, files: dict[str, str]) -> str:
    """sha256 of the file that defines `cls` (read once per file into `files`); '' when it has none."""
    try:
        path = inspect.getsourcefile(cls)
    except TypeError:  # a built-in class
        return ""
    if path is None:
        return ""
    if path not in files:
        try:
            files[path] = sha256_file(path)
        except OSError:  # made at run time (`<stdin>`, a notebook cell)
            files[path] = ""
    return files[path]


def module_digest(module: torch.nn.Module, inputs: list[torch.Tensor], extra: str | None = None) -> str:
    """sha256 over the source files of every module class used, the module tree, weights and inputs.

    The source files catch an edited forward(), and an edited helper function beside it that a class's
    source alone would miss; hashing whole files also skips `inspect.getsource`, which re-parses a
    class's whole module per class (0.16 s of a warm rerun of pipelines/coreml.yaml). The state dict
    catches new weights (hashed in place, without a copy); the inputs' shapes, dtypes and values catch a
    re-specified input. What built the module (source, kwargs) comes in `extra` (`build_digest`); tool
    versions enter the artifact key apart.
    """
    import torch

    digest = hashlib.sha256()
    classes = sorted({type(m) for m in module.modules()}, key=lambda c: f"{c.__module__}.{c.__qualname__}")
    files: dict[str, str] = {}
    for cls in classes:
        digest.update(f"{cls.__module__}.{cls.__qualname__}:{_source_file_sha256(cls, files)}\n".encode())
    digest.update(repr(module).encode())
    for name, tensor in module.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{list(t.shape)}\n".encode())
        if t.numel():
            digest.update(t.reshape(-1).view(dtype=torch.uint8).numpy())
    for tensor in inputs:  # values too: a trace follows the path its example inputs take
        t = tensor.detach().cpu().contiguous()
        digest.update(f"input:{t.dtype}:{list(t.shape)}\n".encode())
        if t.numel():
            digest.update(t.reshape(-1).view(dtype=torch.uint8).numpy().tobytes())
    if extra is not None:  # a saved file's own bytes (TorchScript code is not in any class source)
        digest.update(f"file:{extra}\n".encode())
    return digest.hexdigest()
