"""Estimated prefill and decode latency of a Core AI generation, per chip: each function's ops mapped onto Core
ML's (``estimate.walk_function``), placed by Core ML's rules, and priced for one call by the Core ML backend's
generation estimate (``coreml.generate_estimate``: shapes pinned to the prompt, then to each decode position;
prefill mostly compute, decode mostly the weights and the cache read per token over the chip's bandwidth).

A Core AI linear is a ``broadcasting_batch_matmul`` against a constant weight (through a transpose of it); it
is priced as the Core ML ``linear`` it is (2 × weight elements × tokens), not as attention's matmul against
the cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.records import Metric

if TYPE_CHECKING:  # pragma: no cover
    from mlbench.backends.apple.analysis import ProgramAnalysis
    from mlbench.matrix import Variant
    from mlbench.records import Placement
    from mlbench.sources.loading import LoadedModel


def _linears(analysis: ProgramAnalysis) -> ProgramAnalysis:
    """Matmuls against a constant weight (directly, or through the transpose the converter writes for it), as
    the Core ML linears they are; that transpose is folded, as coremltools folds it."""
    layers = list(analysis.layers)
    for index, layer in enumerate(layers):
        if layer.op_type != "matmul":
            continue
        feeding = [i for i in layer.inputs if layers[i].op_type in ("transpose", "reshape") and layers[i].params]
        params = layer.params or sum(layers[i].params or 0 for i in feeding)
        if not params:
            continue
        weight_bytes = (layer.weight_bytes or 0) + sum(layers[i].weight_bytes or 0 for i in feeding)
        for i in feeding:
            layers[i] = layers[i].model_copy(update={"flops": 0, "bytes": 0, "weight_bytes": 0, "params": 0})
        layers[index] = layer.model_copy(update={"op_type": "linear", "flops": None, "bytes": None, "params": params,
                                                 "weight_bytes": weight_bytes})
    counts: dict[str, int] = {}
    for layer in layers:
        counts[layer.op_type] = counts.get(layer.op_type, 0) + 1
    return analysis.model_copy(update={"layers": layers, "op_counts": counts})


def estimate_generation(path: Path, model: LoadedModel, variant: Variant, chips: list[str]
                        ) -> tuple[dict[str, Metric], dict[str, Any], Placement | None]:
    """`latency.estimated.prefill.<chip>` and `latency.estimated.decode.<chip>`, or absent with the reason; and
    the decode function's estimated placement (the step a generation repeats), None when not estimated."""
    from mlbench.backends.apple.generate_estimate import DECODE_PREFIX, PREFILL_PREFIX, generation_estimates
    from mlbench.backends.apple.placement import estimate_placement
    from mlbench.backends.coreai.estimate import NOTE, walk_function
    from mlbench.generate.eager import causal_lm
    from mlbench.generate.kv_module import cache_shape

    generate = model.spec.generate
    assert generate is not None and variant.prompt is not None
    functions: dict[str, Any] = {}
    for name in ("prefill", "decode"):
        analysis, why = walk_function(path, name)
        if analysis is None:
            reason = f"not estimated: function {name}: {why}"
            return ({f"{prefix}{chip}": Metric.absent("ms", reason) for chip in chips
                     for prefix in (PREFILL_PREFIX, DECODE_PREFIX)}, {"absent": reason}, None)
        analysis = _linears(analysis)
        functions[name] = (analysis, estimate_placement(analysis, variant.axis("compute_units")))
    head_dim = cache_shape(causal_lm(model.torch_module, model.spec.name).config, generate.context).head_dim
    metrics, parts = generation_estimates(functions, chips, prompt=variant.prompt, new_tokens=generate.new_tokens,
                                          head_dim=head_dim)
    placement = functions["decode"][1]
    placement.note = f"{NOTE}. The decode function's, the step a generation repeats. {placement.note or ''}".strip()
    return metrics, {"note": NOTE, **parts}, placement
