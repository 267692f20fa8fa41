"""mlbench's generation estimate against Apple's Llama-3.1-8B steps on M1 Max: the relative gains, not a fit.

    PYTHONPATH=. python benchmarks/calibration_generation.py [--context 2048] [--layers 1]

Apple's "On Device Llama 3.1 with Core ML" (published_apple.csv) gives Llama-3.1-8B-Instruct's decode tokens/s
and time to first token on an M1 Max (GPU), one table per optimisation, at several maximum context sizes (a
7-token prompt, ~100 generated tokens). Each step that mlbench's Core ML export can express is exported here and
estimated by `generate_estimate` (prefill compute-bound, decode bandwidth-bound, the fitted parameters of
chips.yaml); the estimate is then compared step to step with the article:

- Table 1 (static shapes, no cache): the model's plain forward over the whole context, converted as mlbench
  converts a plain model (ML program, float16, the article's macOS13 target); one prediction per token;
- Table 2 (the cache as model inputs and outputs): not exported: mlbench keeps the cache as Core ML state only;
- eager attention, the cache as state: mlbench's generate export as a sweep runs it (no article row; shows what
  the estimate makes of fusing attention);
- Table 3 (the cache as state, fused scaled_dot_product_attention, macOS15 target): the generate export with
  `attention="sdpa"`;
- Table 4 (Table 3 + int4 weights per block of 32): the same with mlbench's `linear_quantize` recipe
  (dtype int4, granularity per_block, block_size 32).

Llama-3.1-8B (32 layers, 16 GB at float16) cannot be exported on a 24 GB machine, so the config keeps every
width (hidden 4096, 32 heads, 8 key/value heads, intermediate 14336, vocabulary 128256) with `--layers` decoder
layers (random seeded float16 weights, nothing downloaded), and the analysis is scaled to 32 layers: the ops of
one decoder layer (from its first RMSNorm to the final norm) are repeated, while the embedding, the rotary
tables, the final norm and lm_head are not — the output says so. Analyses are cached beside the calibration's.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import itertools
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from calibration_models import PUBLISHED_PATH, cache_dir

LLAMA_31_8B = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
               "vocab_size": 128256, "num_hidden_layers": 32, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
               "max_position_embeddings": 131072}  # meta-llama/Llama-3.1-8B-Instruct config.json
TINY = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 512, "num_hidden_layers": 4, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 512}  # the test's stand-in: the same structure, small
INT4_BLOCKS = {"kind": "linear_quantize", "dtype": "int4", "granularity": "per_block", "block_size": 32}
CHIP = "m1max"
COMPUTE_UNITS = "cpu_and_gpu"  # the article targets the GPU
PROMPT, NEW_TOKENS = 7, 100  # the article's prompt and generated tokens


@dataclass(frozen=True)
class Step:
    key: str
    table: str | None  # the article's table ("Table 3"), None where it has no row
    words: str
    stateful: bool = True
    attention: str = "eager"
    optimization: dict | None = None
    exported: bool = True  # False: mlbench cannot express it (said in the output)


STEPS = (
    Step("static", "Table 1", "static shapes, no cache (a full-context forward per token)", stateful=False),
    Step("kv_io", "Table 2", "cache as model inputs/outputs", exported=False),
    Step("state_eager", None, "cache as state, eager attention (mlbench's default export)"),
    Step("state_sdpa", "Table 3", "cache as state, fused SDPA", attention="sdpa"),
    Step("state_sdpa_int4", "Table 4", "cache as state, fused SDPA, int4 per block 32", attention="sdpa",
         optimization=INT4_BLOCKS),
)
TTFT_NAMES = {"Table 1": "baseline", "Table 2": "KV cache as model I/O", "Table 3": "KV cache as state",
              "Table 4": "KV cache as state + Int4"}


def published(context: int, path: Path = PUBLISHED_PATH) -> dict[str, dict[str, float]]:
    """Per article table: decode tokens/s at `context` and, where printed (context 2048), time to first token."""
    out: dict[str, dict[str, float]] = {}
    with path.open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["model"].startswith("Llama-3.1-8B")]
    for row in rows:
        table = re.search(r"\((Table \d)", row["model"])
        if table and row["unit"] == "tokens/s" and f"max context size {context};" in row["input"]:
            out.setdefault(table.group(1), {})["tokens_per_s"] = float(row["figure"])
        name = re.search(r"\(([^)]*)\)$", row["model"])
        if row["unit"] == "ms" and name and f"context size {context};" in row["input"]:
            for table_name, words in TTFT_NAMES.items():
                if name.group(1) == words:
                    out.setdefault(table_name, {})["ttft_ms"] = float(row["figure"])
    return out


def build_lm(widths: dict[str, Any], layers: int, seed: int = 0) -> Any:
    """LlamaForCausalLM at `widths` with `layers` decoder layers, random seeded float16 weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**widths, "num_hidden_layers": layers}, tie_word_embeddings=False)
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float16)  # built at float16: the 8B vocabulary alone is 2 GB at float32
    try:
        return LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(previous)


def _digest() -> str:
    import mlbench.backends.apple as apple
    import mlbench.backends.coreml as coreml
    import mlbench.generate as generate

    shared, root = Path(next(iter(apple.__path__))), Path(coreml.__file__).parent
    files = sorted([*shared.glob("analysis/*.py"), *shared.glob("cost/*.py"), *root.glob("generate/export.py"),
                    root / "compression.py", Path(generate.__file__).parent / "kv_module.py"])
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]


def analyses_for(step: Step, widths: dict[str, Any], layers: int, context: int) -> dict[str, Any]:
    """The step's function analyses ("prefill"/"decode", or "forward"), cached as JSON."""
    from importlib.metadata import version

    from mlbench.backends.apple.analysis import ProgramAnalysis

    key = hashlib.sha256(json.dumps([step.key, step.attention, step.optimization, widths, layers, context,
                                     version("coremltools"), version("torch"), version("transformers"),
                                     _digest()], sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / f"generation-{step.key}-{key}.json"
    if path.exists():
        data = json.loads(path.read_text(encoding="utf-8"))
        return {name: ProgramAnalysis.model_validate(a) for name, a in data.items()}
    print(f"exporting {step.key} ({layers} layer(s), context {context}) ...", file=sys.stderr, flush=True)
    analyses = _export(step, build_lm(widths, layers), context)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".tmp").write_text(json.dumps({n: a.model_dump(mode="json") for n, a in analyses.items()}),
                                        encoding="utf-8")
    path.with_suffix(".tmp").replace(path)
    return analyses


def _export(step: Step, lm: Any, context: int) -> dict[str, Any]:
    from mlbench.backends.apple.analysis import analyse_package
    from mlbench.backends.coreml.generate.export import export_generation, function_packages

    with tempfile.TemporaryDirectory() as tmp:
        if not step.stateful:
            return {"forward": analyse_package(_export_static(lm, context, Path(tmp)))}
        exported = export_generation(lm, context=context, precision="float16", optimization=step.optimization,
                                     dest=Path(tmp) / "generation", attention=step.attention)
        return {name: analyse_package(package, function if function != "main" else None)
                for name, (package, function) in function_packages(exported.folder).items()}


def _export_static(lm: Any, context: int, folder: Path) -> Path:
    """Table 1's model: logits of a [1, context] token input, no cache (eager attention, macOS13 target)."""
    import numpy as np
    import torch

    from mlbench.backends.apple.coremltools_messages import import_coremltools
    from mlbench.backends.coreml.torch_ops import register_extra_torch_ops
    from mlbench.generate.kv_module import causal_mask

    ct = import_coremltools()
    register_extra_torch_ops()
    lm.config._attn_implementation = "eager"

    class Forward(torch.nn.Module):  # positions and the causal mask as constants, as the padded baseline has them
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm
            self.register_buffer("mask", torch.from_numpy(causal_mask(context, 0)))
            self.register_buffer("positions", torch.arange(context).unsqueeze(0))

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.lm(input_ids=input_ids, attention_mask=self.mask, position_ids=self.positions,
                           use_cache=False).logits

    with torch.no_grad():
        traced = torch.jit.trace(Forward().eval(), (torch.zeros(1, context, dtype=torch.int64),))
    model = ct.convert(traced, inputs=[ct.TensorType(name="input_ids", shape=(1, context), dtype=np.int32)],
                       outputs=[ct.TensorType(name="logits")], convert_to="mlprogram",
                       minimum_deployment_target=ct.target.macOS13, compute_precision=ct.precision.FLOAT16,
                       skip_model_load=True)
    path = folder / "model.mlpackage"
    model.save(str(path))
    return path


def scale_layers(analysis: Any, placement: Any, layers: int, target: int) -> tuple[Any, Any]:
    """The analysis and placement of a `layers`-layer Llama program with its decoder layers repeated up to
    `target`: one layer's ops run from its first RMSNorm (a `pow`) to the next layer's; the final norm (the last
    `pow`) and lm_head after it, and the embedding and rotary tables before the first, are kept once."""
    pows = [i for i, layer in enumerate(analysis.layers) if layer.op_type == "pow"]
    if len(pows) != 2 * layers + 1:
        raise ValueError(f"expected {2 * layers + 1} RMSNorms (2 per layer and the final one), found {len(pows)}")
    start, stop = pows[0], pows[-1]
    per_layer = (stop - start) // layers
    block = analysis.layers[stop - per_layer:stop]
    shift = (target - layers) * per_layer

    def moved(layer: Any, by: int) -> Any:
        return layer.model_copy(update={"inputs": [i + by if i >= stop - per_layer else i for i in layer.inputs]})

    repeated = [moved(layer, k * per_layer) for k in range(1, target - layers + 1) for layer in block]
    ops = list(analysis.layers[:stop]) + repeated + [moved(layer, shift) for layer in analysis.layers[stop:]]
    placed = list(placement.ops)
    placed = placed[:stop] + placed[stop - per_layer:stop] * (target - layers) + placed[stop:]
    return (analysis.model_copy(update={"layers": ops}), placement.model_copy(update={"ops": placed}))


def estimate_step(step: Step, analyses: dict[str, Any], layers: int, target: int, head_dim: int) -> dict[str, float]:
    """Estimated decode tokens/s and time to first token (ms) on M1 Max at `target` layers."""
    from mlbench.backends.apple.chips import builtin_chips, calibration
    from mlbench.backends.apple.generate_estimate import generation_estimates
    from mlbench.backends.apple.latency import estimate_latency
    from mlbench.backends.apple.placement import estimate_placement

    fit = calibration()
    if fit is None:
        raise SystemExit("the latency model is not calibrated: run benchmarks/calibrate_latency.py --write")
    placed = {name: scale_layers(a, estimate_placement(a, COMPUTE_UNITS), layers, target)
              for name, a in analyses.items()}
    if not step.stateful:
        ms = estimate_latency(*placed["forward"], builtin_chips()[CHIP], fit.parameters).total_ms
        return {"tokens_per_s": 1e3 / ms, "ttft_ms": ms}
    metrics, _ = generation_estimates(placed, [CHIP], prompt=PROMPT, new_tokens=NEW_TOKENS, head_dim=head_dim)
    decode = metrics[f"latency.estimated.decode.{CHIP}"].value
    prefill = metrics[f"latency.estimated.prefill.{CHIP}"].value
    assert decode is not None and prefill is not None
    return {"tokens_per_s": 1e3 / decode, "ttft_ms": prefill}


def report(context: int = 2048, layers: int = 1, widths: dict[str, Any] | None = None,
           target: int | None = None) -> list[str]:
    """The comparison's lines (module docstring); each step's estimate beside the article's figure."""
    widths = widths or LLAMA_31_8B
    target = target or int(widths["num_hidden_layers"])
    head_dim = widths["hidden_size"] // widths["num_attention_heads"]
    rows = published(context)
    lines = [f"Llama-3.1-8B on {CHIP} (GPU), context {context}, {PROMPT}-token prompt, {NEW_TOKENS} new tokens: "
             f"exported with {layers} decoder layer(s) at the 8B widths (random float16 weights) and scaled to "
             f"{target} layers (each layer's ops repeated; embedding, rotary tables, final norm and lm_head once)",
             f"{'step':<52} {'published':>10} {'estimated':>10} {'est/pub':>8} {'TTFT pub':>9} {'TTFT est':>9}"]
    estimates: dict[str, dict[str, float]] = {}
    for step in STEPS:
        figure = rows.get(step.table or "", {})
        label = f"{step.table + ': ' if step.table else ''}{step.words}"
        if not step.exported:
            lines.append(f"{label:<52} {figure.get('tokens_per_s', float('nan')):>10.2f} "
                         f"{'-':>10} {'':>8}  (not estimated: mlbench exports the cache as state only)")
            continue
        estimates[step.key] = est = estimate_step(step, analyses_for(step, widths, layers, context), layers, target,
                                                  head_dim)
        pub = figure.get("tokens_per_s")
        ratio = f"{est['tokens_per_s'] / pub:>8.2f}" if pub else f"{'-':>8}"
        ttft = figure.get("ttft_ms")
        lines.append(f"{label:<52} {pub if pub else float('nan'):>10.2f} {est['tokens_per_s']:>10.2f} {ratio} "
                     f"{ttft if ttft else float('nan'):>9.1f} {est['ttft_ms']:>9.1f}")
    lines.append("gain of each step over the one before (decode tokens/s; published vs estimated):")
    chain = [s for s in STEPS if s.exported and s.table]
    for before, after in itertools.pairwise(chain):
        pub_b, pub_a = (rows.get(s.table or "", {}).get("tokens_per_s") for s in (before, after))
        est_gain = estimates[after.key]["tokens_per_s"] / estimates[before.key]["tokens_per_s"]
        pub_gain = pub_a / pub_b if pub_a and pub_b else None
        agree = "" if pub_gain is None else ("  same direction" if (pub_gain > 1) == (est_gain > 1)
                                            else "  WRONG DIRECTION")
        lines.append(f"  {before.key} -> {after.key}: published ×{pub_gain or float('nan'):.2f}, "
                     f"estimated ×{est_gain:.2f}{agree}")
    fused = estimates["state_sdpa"]["tokens_per_s"] / estimates["state_eager"]["tokens_per_s"]
    lines.append(f"  state_eager -> state_sdpa (no article row; the article's Table 3 adds both): estimated "
                 f"×{fused:.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=2048, help="the article's maximum context size to compare at")
    ap.add_argument("--layers", type=int, default=1, help="decoder layers exported (then scaled to 32)")
    args = ap.parse_args(argv)
    print("\n".join(report(args.context, args.layers)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
