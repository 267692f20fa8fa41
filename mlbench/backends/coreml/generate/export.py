"""A generative model's Core ML export: the key/value cache as Core ML state, prefill and decode as two
functions of one multifunction ``.mlpackage`` sharing their weights.

The torch side is `mlbench.generate.kv_module.KVCacheLM` (the cache in registered buffers, updated in place),
traced once. coremltools (its "Stateful Models" guide) turns each buffer into a ``ct.StateType`` (iOS18) and
the in-place writes into ``read_state``/``write_state``. It is converted twice from that one trace:

- ``prefill``: ``input_ids`` [1, n] and ``causal_mask`` [1, 1, n, end], n and end flexible up to ``context``
  (one function serves every prompt length);
- ``decode``: ``input_ids`` [1, 1] and ``causal_mask`` [1, 1, 1, end];

then joined with ``ct.utils.MultiFunctionDescriptor`` / ``save_multifunction`` (coremltools deduplicates the
identical weight blobs, so the package holds them once). If joining fails the two functions are saved as two
packages beside each other (``prefill.mlpackage``, ``decode.mlpackage``) and the reason is kept
(``ExportedGeneration.layout_reason``). Weight compression (e.g. int4 per-block) runs on each function
before joining, identically, so the shared weights stay identical.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.backends.apple.coremltools_messages import (
    clean_warnings,
    coremltools_captured,
    import_coremltools,
    import_messages,
    shorten_coremltools_message,
    version_warning,
)
from mlbench.backends.coreml.compression import compress
from mlbench.backends.coreml.deployment import ExportError
from mlbench.backends.coreml.torch_ops import register_extra_torch_ops
from mlbench.errors import one_line

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["FUNCTIONS", "GENERATE_FORMAT", "PACKAGE_NAME", "ExportedGeneration", "export_generation",
           "function_packages"]

PACKAGE_NAME = "model.mlpackage"
FUNCTIONS = ("prefill", "decode")
GENERATE_FORMAT = "coreml-stateful-kv-v1"  # bump when the exported layout changes (it is in the cache key)
DEPLOYMENT_TARGET = "iOS18"  # the first with ct.StateType (MLState) and multifunction packages
STATE_NAMES = ("key_cache", "value_cache")
STATE_DTYPE = "fp16"  # coremltools 9 converts float16 state only ("State only support fp16 dtype"), any precision
METADATA_PREFIX = "mlbench."


@dataclass
class ExportedGeneration:
    folder: Path
    layout: str  # "multifunction" (one package, two functions) or "two packages"
    layout_reason: str | None  # why it is not one multifunction package
    state_shapes: dict[str, list[int]]
    state_dtype: str  # fp16 (the only state dtype coremltools converts)
    context: int
    seconds: float
    warnings: list[str] = field(default_factory=list)
    export_path: str = "torch.jit.trace"  # the one path: torch.export does not carry the buffers' writes as state
    fallback_reason: str | None = None

    @property
    def artifact(self) -> Path:
        return self.folder


def function_packages(folder: Path) -> dict[str, tuple[Path, str]]:
    """Each function's (package, function name inside it) in an export folder, either layout."""
    single = folder / PACKAGE_NAME
    if single.exists():
        return {name: (single, name) for name in FUNCTIONS}
    return {name: (folder / f"{name}.mlpackage", "main") for name in FUNCTIONS}


def export_generation(lm: torch.nn.Module, *, context: int, precision: str, optimization: dict | None,
                      dest: Path, multifunction: bool = True, attention: str = "eager") -> ExportedGeneration:
    """Export the causal LM `lm` (a transformers ...ForCausalLM) with a `context`-position cache into `dest`.
    `attention`: "eager" (matmul, softmax, matmul: what a sweep exports) or "sdpa" (one fused
    scaled_dot_product_attention op; `benchmarks/calibration_generation.py` compares the two).

    Raises ExportError (one line) when the trace or a conversion fails."""
    import numpy as np
    import torch

    from mlbench.generate.kv_module import KVCacheLM, causal_mask

    ct = import_coremltools()
    register_extra_torch_ops()
    started = time.perf_counter()
    sink: list[str] = []
    # coremltools 9: "State only support fp16 dtype" — a float32 program too keeps its cache in float16
    wrapper = KVCacheLM(lm, context, cache_dtype=torch.float16, attention=attention).eval()
    example = min(4, context)
    try:
        with coremltools_captured(sink), torch.no_grad():
            traced = torch.jit.trace(wrapper, (torch.zeros(1, example, dtype=torch.int64),
                                               torch.from_numpy(causal_mask(example, 0))))
    except Exception as exc:  # noqa: BLE001 - one line for the user
        raise ExportError(f"Core ML generative export: torch.jit.trace failed: {shorten_coremltools_message(exc)}") from None
    shape = tuple(int(d) for d in wrapper.geometry.shape)
    states = [ct.StateType(wrapped_type=ct.TensorType(shape=shape, dtype=np.float16), name=n) for n in STATE_NAMES]
    n = ct.RangeDim(1, context, default=example, symbol="query")
    end = ct.RangeDim(1, context, default=example, symbol="end")
    signatures = {
        "prefill": [ct.TensorType(name="input_ids", shape=(1, n), dtype=np.int32),
                    ct.TensorType(name="causal_mask", shape=(1, 1, n, end), dtype=np.float32)],
        "decode": [ct.TensorType(name="input_ids", shape=(1, 1), dtype=np.int32),
                   ct.TensorType(name="causal_mask", shape=(1, 1, 1, end), dtype=np.float32)],
    }
    options = {"convert_to": "mlprogram", "minimum_deployment_target": ct.target.iOS18, "skip_model_load": True,
               "compute_precision": ct.precision.FLOAT16 if precision == "float16" else ct.precision.FLOAT32}
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    parts: dict[str, Path] = {}
    for name, inputs in signatures.items():
        try:
            with coremltools_captured(sink):
                mlmodel = ct.convert(traced, inputs=inputs, outputs=[ct.TensorType(name="logits")], states=states,
                                     **options)
        except Exception as exc:  # noqa: BLE001
            raise ExportError(f"Core ML generative export: converting {name} failed: "
                              f"{shorten_coremltools_message(exc)}") from None
        if optimization is not None:
            mlmodel = compress(ct, mlmodel, optimization, sink)
        _stamp(mlmodel, precision, optimization, context, name, ct)
        parts[name] = dest / f"{name}.mlpackage"
        with coremltools_captured(sink):
            mlmodel.save(str(parts[name]))
    layout, reason = "two packages", "multifunction not requested"  # type: str, str | None
    if multifunction:
        reason = _join(ct, parts, dest / PACKAGE_NAME, sink)
        if reason is None:
            layout = "multifunction"
            for path in parts.values():
                shutil.rmtree(path)
    return ExportedGeneration(
        folder=dest, layout=layout, layout_reason=reason,
        state_shapes={s: list(shape) for s in STATE_NAMES}, state_dtype=STATE_DTYPE,
        context=context, seconds=time.perf_counter() - started,
        warnings=version_warning(ct) + clean_warnings(import_messages() + sink))


def _join(ct: Any, parts: dict[str, Path], target: Path, sink: list[str]) -> str | None:
    """Save the functions as one multifunction package; the reason it could not be, else None."""
    try:
        descriptor = ct.utils.MultiFunctionDescriptor()
        for name, path in parts.items():
            descriptor.add_function(str(path), src_function_name="main", target_function_name=name)
        descriptor.default_function_name = "decode"
        with coremltools_captured(sink):
            ct.utils.save_multifunction(descriptor, str(target))
    except Exception as exc:  # noqa: BLE001 - fall back to two packages and say why
        if target.exists():
            shutil.rmtree(target)
        return one_line(f"save_multifunction failed: {shorten_coremltools_message(exc)}")
    return None


def _stamp(mlmodel: Any, precision: str, optimization: dict | None, context: int, function: str, ct: Any) -> None:
    import torch

    metadata = {"precision": precision, "deployment_target": DEPLOYMENT_TARGET, "generate_format": GENERATE_FORMAT,
                "optimization": json.dumps(optimization, sort_keys=True) if optimization is not None else "none",
                "context": str(context), "function": function, "torch_version": str(torch.__version__),
                "coremltools_version": str(ct.__version__)}
    for key, value in metadata.items():
        mlmodel.user_defined_metadata[METADATA_PREFIX + key] = value
