"""Backends, resolved by name. Each is a target config model plus a class that does the work.

Target models are imported eagerly (they are light: pydantic only) so the pipeline schema knows
them; backend classes are imported only when a run needs them, since they pull in torch or
coremltools.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from mlbench.backends.coreml.target import CoremlTarget
from mlbench.backends.onnxruntime.target import OnnxruntimeTarget
from mlbench.backends.torch.target import TorchTarget

if TYPE_CHECKING:
    from mlbench.backends.base import Backend

TARGET_MODELS = (TorchTarget, CoremlTarget, OnnxruntimeTarget)
"""Every target model, in the order the schema lists them."""

_BACKEND_CLASSES = {
    "torch": "mlbench.backends.torch.backend:TorchBackend",
    "coreml": "mlbench.backends.coreml.backend:CoremlBackend",
    "onnxruntime": "mlbench.backends.onnxruntime.backend:OnnxruntimeBackend",
}


def backend_class(name: str) -> type[Backend]:
    module_name, _, attr = _BACKEND_CLASSES[name].partition(":")
    return getattr(importlib.import_module(module_name), attr)
