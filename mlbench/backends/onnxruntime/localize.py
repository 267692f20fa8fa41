"""Where an ONNX Runtime variant loses accuracy: every node's output exposed as an extra graph output, the
float16 graph run beside the same model's float32 graph on the CPU provider, paired node by node.

Origins come from the graph itself: the dynamo exporter keeps, per node, the module path
(``pkg.torch.onnx.name_scopes``), the classes (``pkg.torch.onnx.class_hierarchy``) and the stack
(``pkg.torch.onnx.stack_trace``); the TorchScript exporter only its scope in the node's name
(``/blocks.0/fc/Gemm``), without a line. Shares: ONNX Runtime runs the graph whole, so each op measured is
cut out of it (``localize_shares``).
"""

from __future__ import annotations

import ast
import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlbench.backends.localize_graph import Node, localize_nodes
from mlbench.backends.source_frames import module_path, op_kind, trace_frames, user_frame, wrapper_prefix
from mlbench.config.base import NO_OPTIMIZATION
from mlbench.localization import ErrorLocalization, OpOrigin

if TYPE_CHECKING:
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel

__all__ = ["graph_feeds", "graph_origins", "graph_values", "localize_graphs", "localize_variant"]



def graph_origins(graph: Any, prefix: str = "") -> dict[str, OpOrigin]:
    """Node output name -> origin, from the exporter's metadata (dynamo) or the node's scoped name; module
    paths without the wrapper's ``prefix`` (``source_frames.wrapper_prefix``)."""
    found: dict[str, OpOrigin] = {}
    for node in graph.node:
        meta = {p.key: p.value for p in node.metadata_props}
        origin = _from_metadata(meta) if "pkg.torch.onnx.name_scopes" in meta else _from_name(node)
        if origin is not None:
            origin = origin.model_copy(update={"module": module_path(origin.module, prefix)})
            for output in node.output:
                found[output] = origin
    return found


def _from_metadata(meta: dict[str, str]) -> OpOrigin | None:
    try:
        scopes = [str(s) for s in ast.literal_eval(meta["pkg.torch.onnx.name_scopes"])]
        classes = [str(c) for c in ast.literal_eval(meta.get("pkg.torch.onnx.class_hierarchy", "[]"))]
    except (ValueError, SyntaxError):
        return None
    module = scopes[-2] if len(scopes) >= 2 else ""
    op = op_kind(classes[-1]) if classes and classes[-1].startswith("aten.") else op_kind(scopes[-1] if scopes else "")
    file, line = user_frame(trace_frames(meta.get("pkg.torch.onnx.stack_trace")))
    return OpOrigin(module=module, module_type=classes[-2] if len(classes) >= 2 else None, op=op, file=file, line=line)


def _from_name(node: Any) -> OpOrigin | None:
    parts = [p for p in node.name.split("/") if p]
    if len(parts) < 2:
        return None
    return OpOrigin(module=".".join(parts[:-1]), op=node.op_type.lower())


def graph_values(path: Path, feeds: dict[str, np.ndarray]) -> tuple[Any, dict[str, np.ndarray]]:
    """(the graph, the inputs' and every node output's value) for one run on the CPU provider."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path))
    declared = {o.name for o in model.graph.output}
    for node in model.graph.node:
        for output in node.output:
            if output and output not in declared:
                model.graph.output.append(onnx.ValueInfoProto(name=output))
                declared.add(output)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, feeds)
    graph = model.graph
    found = {name: np.asarray(value) for name, value in zip(names, values) if isinstance(value, np.ndarray)}
    return graph, {**{name: np.asarray(value) for name, value in feeds.items()}, **found}


def localize_graphs(variant: Path, reference: Path, feeds: list[dict[str, np.ndarray]], *, variant_id: str,
                    reference_label: str, prefix: str = "") -> ErrorLocalization:
    """Per-node error of the graph ``variant`` against ``reference`` over ``feeds``."""
    started = time.perf_counter()
    runs = [(graph_values(variant, sample)[1], graph_values(reference, sample)[1]) for sample in feeds]
    graph = onnx_graph(variant)
    pairs = _pairs(graph, runs[0][1] if runs else {})
    nodes = [Node(n.output[0], n.op_type, [i for i in n.input if i], list(n.output)) for n in _ordered(graph)]
    found = localize_nodes(nodes, runs, pairs=pairs, origins=graph_origins(graph, prefix),
                           constants={i.name for i in graph.initializer}, outputs=[o.name for o in graph.output],
                           variant_id=variant_id, backend="onnxruntime", reference_label=reference_label,
                           source="measured", started=started,
                           why_unpaired="no reference node has this output (inserted by the float16 conversion or "
                           "rewritten), nor does it cast one")
    if Path(variant) != Path(reference):
        import onnx

        from mlbench.backends.localize_graph import NO_SHARES
        from mlbench.backends.onnxruntime.localize_shares import measure_shares

        measure_shares(onnx.load(str(variant)), onnx.load(str(reference)), runs, feeds, found, pairs)
        found.notes = [n for n in found.notes if n != NO_SHARES] + [SHARES]
    found.seconds = time.perf_counter() - started
    return found


SHARES = ("shares: the reference graph run with the op's (or module's) outputs computed by its variant nodes alone, "
          "on the reference's values (ONNX Runtime CPU), for the ops and modules that lose the most dB")


def onnx_graph(path: Path) -> Any:
    import onnx

    return onnx.load(str(path), load_external_data=False).graph


def _pairs(graph: Any, reference: dict[str, np.ndarray]) -> dict[str, str | None]:
    """Variant output -> reference output: the same name, or through a Cast the reference lacks (a Cast
    before a node stands for its input; a node renamed to feed a Cast to a graph output, for that output)."""
    pairs: dict[str, str | None] = {name: name for name in reference}
    for node in _ordered(graph):
        for output in node.output:
            if output in reference:
                continue
            source = node.input[0] if node.op_type == "Cast" and node.input else None
            pairs[output] = pairs.get(source) if source else None
    for node in graph.node:
        if node.op_type == "Cast" and node.input and node.output[0] in reference and pairs.get(node.input[0]) is None:
            pairs[node.input[0]] = node.output[0]
    return pairs


def _ordered(graph: Any) -> list[Any]:
    """The graph's nodes in an order where each comes after what it reads (the float16 conversion appends
    its Casts at the end of the list)."""
    produced = {output: node for node in graph.node for output in node.output}
    done: set[int] = set()
    order: list[Any] = []

    def visit(node: Any) -> None:
        stack = [(node, False)]
        while stack:
            current, expanded = stack.pop()
            if id(current) in done:
                continue
            if expanded:
                done.add(id(current))
                order.append(current)
                continue
            stack.append((current, True))
            stack += [(produced[i], False) for i in current.input if i in produced and id(produced[i]) not in done]

    for node in graph.node:
        visit(node)
    return order


def graph_feeds(path: Path, inputs: list[Any]) -> dict[str, np.ndarray]:
    """The model's input tensors by the graph's input names (initializers are not inputs)."""

    graph = onnx_graph(path)
    initializers = {i.name for i in graph.initializer}
    names = [i.name for i in graph.input if i.name not in initializers]
    if len(names) != len(inputs):
        raise ValueError(f"the ONNX graph takes {len(names)} inputs ({', '.join(names)}); the model has {len(inputs)}")
    return {name: tensor.detach().cpu().numpy() for name, tensor in zip(names, inputs)}


def localize_variant(backend: Any, model: LoadedModel, variant: Variant) -> ErrorLocalization:
    """A sweep's variant against the same model's float32 graph (exported through the cache); with the module
    outputs against eager PyTorch."""
    from mlbench.backends.eager_modules import eager_modules

    started = time.perf_counter()
    prefix = wrapper_prefix(model.torch_module)
    reference = dataclasses.replace(variant, axes=tuple(
        (k, "float32" if k == "precision" else NO_OPTIMIZATION if k == "optimize" else v) for k, v in variant.axes))
    path = backend.export(model, variant).payload.path
    alternative = model.alternative(variant.shape)
    samples = [model.sample(i, alternative)[0] for i in range(backend.config.verify.samples)]
    feeds = [graph_feeds(path, inputs) for inputs in samples]
    if reference == variant:
        found = localize_graphs(path, path, feeds[:1], variant_id=variant.id, reference_label="itself", prefix=prefix)
        found.notes.insert(0, "a float32 graph is its own reference: see the module outputs against eager PyTorch")
    else:
        found = localize_graphs(path, backend.export(model, reference).payload.path, feeds, variant_id=variant.id,
                                reference_label=f"{reference.id} (float32), ONNX Runtime CPU", prefix=prefix)
    if model.has_source:
        graph, values = graph_values(path, feeds[0])
        program = [(node.output[0], node.output[0], values.get(node.output[0])) for node in _ordered(graph)]
        found.eager = eager_modules(model.torch_module, samples[0], program, graph_origins(graph, prefix))
    found.seconds = time.perf_counter() - started
    return found
