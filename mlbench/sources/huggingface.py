"""Hugging Face transformers models, offline: from a config with random weights, or from a local
`save_pretrained` folder. transformers is an optional extra (`pip install 'mlbench-ondevice[transformers]'`),
imported only when a model uses such a source.

    source: transformers:BertModel                      # the class: top-level, or dotted (models.x.modeling_x.Y)
    kwargs: {config: {hidden_size: 128, num_hidden_layers: 2}}
    # an Auto class needs the model type: transformers:AutoModel with config: {model_type: bert, ...}

    source: path/to/saved_dir                           # config.json + weights (safetensors or .bin)
    kwargs: {class: BertForMaskedLM}                    # optional; default: the config's architectures[0]

Nothing is downloaded: the config is built in memory (`AutoConfig.for_model` or the class's
`config_class`), and a folder is read with `local_files_only=True`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mlbench.errors import first_line
from mlbench.sources.errors import ModelLoadError

__all__ = ["from_config", "from_folder"]


def _transformers() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the network from a benchmark
    try:
        import transformers
    except ImportError:
        raise ModelLoadError("transformers is not installed; install it with pip install 'mlbench-ondevice[transformers]'"
                             ) from None
    transformers.logging.set_verbosity_error()
    return transformers


def _model_class(transformers: Any, name: str) -> Any:
    obj: Any = transformers
    for part in name.split("."):
        try:
            obj = getattr(obj, part)
        except (AttributeError, ImportError, RuntimeError):
            raise ModelLoadError(f"transformers {transformers.__version__} has no class '{name}'") from None
    if not isinstance(obj, type):
        raise ModelLoadError(f"transformers.{name} is not a class")
    return obj


def from_config(class_name: str, kwargs: dict[str, Any]) -> Any:
    """A model of class `class_name` with random weights from `kwargs['config']` (the caller seeds)."""
    transformers = _transformers()
    extra = sorted(set(kwargs) - {"config"})
    if extra:
        raise ModelLoadError(f"transformers sources take kwargs: config (got {', '.join(extra)})")
    settings = dict(kwargs.get("config") or {})
    cls = _model_class(transformers, class_name)
    try:
        if "model_type" in settings:
            config = transformers.AutoConfig.for_model(settings.pop("model_type"), **settings)
        elif getattr(cls, "config_class", None) is not None:
            config = cls.config_class(**settings)
        else:
            raise ModelLoadError(f"{class_name} needs config.model_type (e.g. bert) to choose its config")
        if hasattr(cls, "from_config") and not hasattr(cls, "config_class"):  # an Auto class
            return cls.from_config(config)
        return cls(config)
    except ModelLoadError:
        raise
    except Exception as exc:  # a user's config: whatever transformers raises becomes one line
        raise ModelLoadError(f"building transformers.{class_name} failed: {first_line(exc)}") from exc


def from_folder(path: Path, kwargs: dict[str, Any]) -> Any:
    """The model saved in `path` by save_pretrained (class: kwargs['class'], else the config's architecture)."""
    transformers = _transformers()
    extra = sorted(set(kwargs) - {"class"})
    if extra:
        raise ModelLoadError(f"a saved Hugging Face folder takes kwargs: class (got {', '.join(extra)})")
    try:
        config = transformers.AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # a user's folder: whatever transformers raises becomes one line
        raise ModelLoadError(f"cannot read {path.name}/config.json: {first_line(exc)}") from exc
    name = kwargs.get("class") or next(iter(getattr(config, "architectures", None) or []), "AutoModel")
    cls = _model_class(transformers, str(name))
    try:
        return cls.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # a user's folder: whatever transformers raises becomes one line
        raise ModelLoadError(f"loading {path.name} as {name} failed: {first_line(exc)}") from exc
