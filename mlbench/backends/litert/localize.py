"""Where a LiteRT variant loses accuracy: the interpreter keeps every tensor
(``experimental_preserve_all_tensors``, LiteRT's builtin reference kernels, no delegate), the float16 or
quantized model runs beside the same model's float32 one, and tensors are paired by name.

Origins: the converter names each tensor by its module scope, classes and attributes
(``pkg.Stack/pkg.Block_0/torch.nn.modules.linear.Linear_fc;2``; a ModuleList or ModuleDict, never called,
leaves its own name out). mlbench matches that scope against the model's own modules to name the path
(``blocks.0.fc``); a scope two modules share is left unnamed. LiteRT keeps no source line. Shares: the
model cut around each op (``localize_shares``).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlbench.backends.localize_graph import Node, localize_nodes
from mlbench.backends.source_frames import module_path, wrapper_prefix
from mlbench.config.base import NO_OPTIMIZATION
from mlbench.localization import ErrorLocalization, OpOrigin

if TYPE_CHECKING:
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel

__all__ = ["interpreter_values", "localize_models", "localize_variant", "scope_paths"]

NO_LINE = "LiteRT keeps no source line: modules are named from the tensors' scopes"


def _class(module: Any) -> str:
    return f"{type(module).__module__}.{type(module).__qualname__}"


def scope_paths(module: Any) -> dict[str, tuple[str, str] | None]:
    """LiteRT scope text -> (module path, its class) (None where two modules give the same scope)."""
    import torch

    skipped = (torch.nn.ModuleList, torch.nn.ModuleDict)
    prefix = wrapper_prefix(module)
    modules = dict(module.named_modules())
    table: dict[str, tuple[str, str] | None] = {}
    for path, sub in modules.items():
        if not path or isinstance(sub, skipped):
            continue
        parts = path.split(".")
        segments = [_class(module)]
        for depth in range(1, len(parts) + 1):
            ancestor = modules[".".join(parts[:depth])]
            if not isinstance(ancestor, skipped):
                segments.append(f"{_class(ancestor)}_{parts[depth - 1]}")
        scope = "/".join(segments)
        table[scope] = None if scope in table else (module_path(path, prefix), _class(sub))
    return table


def interpreter_values(path: Path, arrays: list[np.ndarray]) -> tuple[list[Node], dict[str, np.ndarray],
                                                                      set[str], list[str], dict[str, Any]]:
    """(the ops in execution order, every tensor's value by name (dequantized), the constant tensors, the
    output names, tensor details by name) after one call on LiteRT's builtin kernels."""
    from mlbench.backends.capture import quiet_native_stderr
    from mlbench.backends.litert.runtime import to_tensor

    with quiet_native_stderr():
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        interp = Interpreter(model_path=str(path), experimental_preserve_all_tensors=True,
                             experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        interp.allocate_tensors()
    details = interp.get_tensor_details()
    names = _unique_names(details)
    inputs = interp.get_input_details()
    for detail, array in zip(inputs, arrays):
        interp.set_tensor(detail["index"], to_tensor(np.asarray(array), detail))  # a full_int8 input: quantized
    interp.invoke()
    produced: set[int] = set()
    nodes = []
    for op in interp._get_ops_details():  # the interpreter's execution plan (also read by runtime.py)
        outs = [int(i) for i in op["outputs"] if int(i) >= 0]
        produced.update(outs)
        nodes.append(Node(names[outs[0]] if outs else op["op_name"], op["op_name"],
                          [names[int(i)] for i in op["inputs"] if int(i) >= 0], [names[i] for i in outs]))
    values: dict[str, np.ndarray] = {}
    for detail in details:
        try:
            value = np.asarray(interp.get_tensor(detail["index"]))
        except ValueError:  # a tensor the interpreter did not keep
            continue
        scale, zero = detail.get("quantization", (0.0, 0))
        if value.dtype in (np.int8, np.uint8, np.int16) and scale:
            value = (value.astype(np.float64) - zero) * scale
        values[names[detail["index"]]] = value
    feeds = {int(d["index"]) for d in inputs}
    constants = {names[d["index"]] for d in details if d["index"] not in produced and d["index"] not in feeds}
    constants |= {n.outputs[0] for n in nodes if n.outputs and all(i in constants for i in n.inputs)}
    outputs = [names[d["index"]] for d in interp.get_output_details()]
    return nodes, values, constants, outputs, {names[d["index"]]: d for d in details}


def _unique_names(details: list[dict]) -> dict[int, str]:
    seen: dict[str, int] = {}
    for detail in details:
        seen[detail["name"]] = seen.get(detail["name"], 0) + 1
    return {d["index"]: d["name"] if seen[d["name"]] == 1 else f"{d['name']}#{d['index']}" for d in details}


_TORCH_OPS = {"FULLY_CONNECTED": "linear", "CONV_2D": "conv2d", "DEPTHWISE_CONV_2D": "conv2d",
              "BATCH_MATMUL": "matmul", "MEAN": "mean", "SUM": "sum"}


def _origins(nodes: list[Node], scopes: dict[str, tuple[str, str] | None]) -> dict[str, OpOrigin]:
    found: dict[str, OpOrigin] = {}
    for node in nodes:
        named = scopes.get(node.name.split(";")[0])
        if named is not None:
            found[node.name] = OpOrigin(module=named[0], module_type=named[1],
                                        op=_TORCH_OPS.get(node.op_type, node.op_type.lower()))
    return found


def localize_models(variant: Path, reference: Path, samples: list[list[np.ndarray]], *, variant_id: str,
                    reference_label: str, module: Any = None) -> ErrorLocalization:
    """Per-op error of the .tflite ``variant`` against ``reference`` over ``samples`` (input arrays in order)."""
    started = time.perf_counter()
    runs = []
    nodes: list[Node] = []
    constants: set[str] = set()
    outputs: list[str] = []
    for arrays in samples:
        nodes, got, constants, outputs, _ = interpreter_values(variant, arrays)
        _, want, _, ref_outputs, _ = interpreter_values(reference, arrays)
        runs.append((got, want))
    reference_values = runs[0][1] if runs else {}
    pairs: dict[str, str | None] = {name: name if name in reference_values else None
                                    for node in nodes for name in node.outputs}
    for output, ref_output in zip(outputs, ref_outputs if runs else []):
        pairs[output] = ref_output
    produced = set(pairs)
    for name in runs[0][0] if runs else {}:  # the inputs: a full_int8 model's are quantized, its first error
        if name not in produced and name not in constants and name in reference_values:
            pairs[name] = name
    for node in nodes:  # a variant's DEQUANTIZE of an input stands for its input
        if pairs.get(node.name) is None and node.op_type in ("DEQUANTIZE", "QUANTIZE") and node.inputs:
            pairs[node.name] = pairs.get(node.inputs[0])
    computed = [n for n in nodes if n.outputs and n.outputs[0] not in constants]
    found = localize_nodes(computed, runs, pairs=pairs, origins=_origins(computed, scope_paths(module)) if module
                           is not None else {}, constants=constants, outputs=outputs, variant_id=variant_id,
                           backend="litert", reference_label=reference_label, source="measured", started=started,
                           why_unpaired="no tensor of the reference has this name (added by the conversion)")
    found.notes.append(NO_LINE)
    if Path(variant) != Path(reference) and runs:
        from mlbench.backends.litert.localize_shares import measure_shares
        from mlbench.backends.localize_graph import NO_SHARES

        if measure_shares(variant, reference, samples, runs, found, pairs, outputs, _unique_names):
            found.notes = [n for n in found.notes if n != NO_SHARES] + [SHARES]
    found.seconds = time.perf_counter() - started
    return found


SHARES = ("shares: the reference model run with the op's (or module's) outputs computed by its variant ops alone, "
          "cut out of the model, on the reference's values (LiteRT builtin kernels)")


def localize_variant(backend: Any, model: LoadedModel, variant: Variant) -> ErrorLocalization:
    """A sweep's variant against the same model's float32 .tflite (exported through the cache), with module
    outputs against eager PyTorch."""
    from mlbench.backends.eager_modules import eager_modules

    started = time.perf_counter()
    reference = dataclasses.replace(variant, axes=tuple(
        (k, "float32" if k == "precision" else NO_OPTIMIZATION if k == "optimize" else v) for k, v in variant.axes))
    path = backend.export(model, variant).payload.path
    alternative = model.alternative(variant.shape)
    samples = [model.sample(i, alternative)[0] for i in range(backend.config.verify.samples)]
    arrays = [[t.detach().cpu().numpy() for t in inputs] for inputs in samples]
    module = model.torch_module
    if reference == variant:
        found = localize_models(path, path, arrays[:1], variant_id=variant.id, reference_label="itself", module=module)
        found.notes.insert(0, "a float32 model is its own reference: see the module outputs against eager PyTorch")
    else:
        found = localize_models(path, backend.export(model, reference).payload.path, arrays, variant_id=variant.id,
                                reference_label=f"{reference.id} (float32), LiteRT builtin kernels", module=module)
    if model.has_source:
        nodes, values, constants, _, _ = interpreter_values(path, arrays[0])
        program = [(n.name, n.name, values.get(n.name)) for n in nodes if n.name not in constants]
        found.eager = eager_modules(module, samples[0], program, _origins(nodes, scope_paths(module)))
    found.seconds = time.perf_counter() - started
    return found
