"""Models you already have, as files: a saved torch.export program (`.pt2`), a TorchScript module
(`.pt`), or a Hugging Face `save_pretrained` folder (`huggingface.from_folder`).

    source: models/encoder.pt2       # torch.export.save(torch.export.export(model, args), path)
    source: models/encoder.pt        # torch.jit.save(torch.jit.trace(model, args), path)
    source: models/bert_saved        # a folder with config.json
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mlbench.errors import first_line
from mlbench.sources.errors import ModelLoadError


def load_saved(path: Path, kwargs: dict[str, Any]) -> Any:
    """The nn.Module the file or folder at `path` holds."""
    if not path.exists():
        raise ModelLoadError(f"saved model not found: {path}")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{path.name} is a folder without config.json (a save_pretrained folder has one)")
        from mlbench.sources.huggingface import from_folder

        return from_folder(path, kwargs)
    if kwargs:
        raise ModelLoadError(f"'{path.name}' is a saved model; it takes no kwargs")
    if path.suffix == ".pt2":
        import logging

        torch_log = logging.getLogger("torch.export")  # logs its own ~20-line traceback before it raises
        was = torch_log.disabled
        torch_log.disabled = True
        try:
            program = torch.export.load(str(path))
        except Exception as exc:  # a user's file: whatever torch.export.load raises becomes one line naming it
            raise ModelLoadError(f"torch.export.load({path.name}) failed: {first_line(exc)}") from exc
        finally:
            torch_log.disabled = was
        return ExportedModule(program.module())
    if path.suffix == ".pt":
        try:
            return torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:  # a user's file: whatever torch.jit.load raises becomes one line naming it
            raise ModelLoadError(f"torch.jit.load({path.name}) failed (a .pt source is a TorchScript file "
                                 f"from torch.jit.save): {first_line(exc)}") from exc
    raise ModelLoadError(f"'{path.name}' is not a saved model: use .pt2 (torch.export), .pt (TorchScript) or "
                         "a save_pretrained folder")


class ExportedModule(torch.nn.Module):
    """A loaded ExportedProgram's module as an ordinary module: it is always in eval mode (torch refuses
    eval() and train() on it), so switching modes here leaves it alone."""

    def __init__(self, program_module: torch.nn.Module) -> None:
        super().__init__()
        self.program = program_module

    def train(self, mode: bool = True) -> ExportedModule:
        self.training = mode
        return self

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.program(*args, **kwargs)


def file_digest(path: Path) -> str:
    """sha256 of a saved model's bytes (a folder: of its files, by relative path)."""
    import hashlib

    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode())
        with file.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()
