"""How many real models reach Core ML: mlbench's exporter beside plain torch.jit.trace + coremltools.convert.

For every torchvision classification and segmentation model under 100M parameters (weights=None) and a
set of small Hugging Face transformers configs (random weights, offline), exports to a float16 ML
program twice:

* plain: ``torch.jit.trace(model, inputs, strict=False)`` then ``ct.convert(traced, inputs=[TensorType])``,
  as a user would write it (transformers models traced with their inputs in forward()'s order);
* mlbench: ``export_coreml`` as `mlbench run` calls it (inputs bound by name, outputs flattened, the
  torch.export fallback, mlbench's extra op converters).

The plain pass runs first for every model, before mlbench registers its converters in this process.
Prints one line per model, both success counts, and the models where they differ (target: mlbench
succeeds on every model plain coremltools converts, and more through its fallback).

Slow (a minute or more per large model on two cores): choose with --models (comma-separated names,
or 'torchvision', 'transformers') and --limit N.

  python benchmarks/zoo_coverage.py --models transformers
  python benchmarks/zoo_coverage.py --models resnet18,vit_b_16,bert --limit 10
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MAX_PARAMS = 100e6
SMALL = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 256,
         "vocab_size": 1000}
TEXT = [{"name": "input_ids", "dtype": "int64", "shape": [1, 64], "range": [0, 1000]},
        {"name": "attention_mask", "dtype": "int64", "shape": [1, 64], "fill": "ones"}]
IDS = TEXT[:1]
TRANSFORMERS: dict[str, tuple[str, dict[str, Any], list[dict[str, Any]]]] = {
    "bert": ("BertModel", {**SMALL, "max_position_embeddings": 128}, TEXT),
    "distilbert": ("DistilBertModel", {"dim": 128, "n_layers": 2, "n_heads": 2, "hidden_dim": 256,
                                       "vocab_size": 1000}, TEXT),
    "roberta": ("RobertaModel", {**SMALL, "max_position_embeddings": 130, "pad_token_id": 1}, TEXT),
    "gpt2": ("GPT2LMHeadModel", {"n_embd": 128, "n_layer": 2, "n_head": 2, "vocab_size": 1000, "n_positions": 128,
                                 "use_cache": False}, IDS),
    "clip_text": ("CLIPTextModel", {**SMALL, "max_position_embeddings": 64}, IDS),
    "t5_encoder": ("T5EncoderModel", {"d_model": 128, "d_kv": 32, "d_ff": 256, "num_layers": 2, "num_heads": 4,
                                      "vocab_size": 1000}, IDS),
    "vit": ("ViTModel", {**SMALL, "image_size": 64, "patch_size": 16},
            [{"name": "pixel_values", "shape": [1, 3, 64, 64]}]),
    "whisper_encoder": ("WhisperForAudioClassification", {"d_model": 128, "encoder_layers": 2,
                        "encoder_attention_heads": 2, "encoder_ffn_dim": 256, "decoder_layers": 1,
                        "decoder_attention_heads": 2, "decoder_ffn_dim": 256, "num_mel_bins": 80,
                        "max_source_positions": 100}, [{"name": "input_features", "shape": [1, 80, 200]}]),
    "llama": ("LlamaForCausalLM", {**SMALL, "num_key_value_heads": 2, "max_position_embeddings": 128,
                                   "use_cache": False}, IDS),
    "mobilebert": ("MobileBertModel", {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                                       "intermediate_size": 128, "embedding_size": 64, "true_hidden_size": 64,
                                       "intra_bottleneck_size": 64, "vocab_size": 1000}, TEXT),
}


@dataclass
class Outcome:
    ok: bool
    seconds: float
    detail: str = ""  # the export path, or the first line of the failure


@dataclass
class Row:
    name: str
    params: float | None
    plain: Outcome | None = None
    mlbench: Outcome | None = None
    notes: list[str] = field(default_factory=list)


def torchvision_models() -> dict[str, float]:
    """name -> parameter count (from the weights' metadata) for every classification and segmentation model
    under MAX_PARAMS."""
    import torchvision.models as tvm

    names = tvm.list_models(module=tvm) + tvm.list_models(module=tvm.segmentation)
    out: dict[str, float] = {}
    for name in names:
        params = next(iter(tvm.get_model_weights(name))).meta.get("num_params")
        if params is not None and params < MAX_PARAMS:
            out[name] = float(params)
    return out


def spec_for(name: str) -> Any:
    """The mlbench ModelSpec of a benchmark model."""
    from mlbench.config.models import ModelSpec

    if name in TRANSFORMERS:
        cls, config, inputs = TRANSFORMERS[name]
        return ModelSpec.model_validate({"name": name, "source": f"transformers:{cls}",
                                         "kwargs": {"config": config}, "inputs": inputs})
    size = 520 if name in ("raft_large", "raft_small") else 299 if name == "inception_v3" else 224
    kwargs: dict[str, Any] = {"weights": None}
    if name.startswith(("fcn_", "deeplabv3_", "lraspp_")):
        kwargs["weights_backbone"] = None
    return ModelSpec.model_validate({"name": name, "source": f"torchvision:{name}", "kwargs": kwargs,
                                     "inputs": [{"name": "image", "shape": [1, 3, size, size]}]})


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:160]


def _timed(fn: Callable[[], str]) -> Outcome:
    started = time.perf_counter()
    try:
        detail = fn()
        return Outcome(True, time.perf_counter() - started, detail)
    except Exception as exc:  # noqa: BLE001 - every failure is a row in the table
        return Outcome(False, time.perf_counter() - started, _first_line(exc))


def plain_export(spec: Any, dest: Path) -> Outcome:
    """torch.jit.trace + coremltools.convert, float16 ML program, as a user would write it."""
    import coremltools as ct
    import numpy as np
    import torch

    from mlbench.sources.loading import build_module, make_inputs, seed_everything

    def run() -> str:
        seed_everything(0)
        module = build_module(spec, ROOT)[0].eval()
        inputs = make_inputs(spec, 0)
        with torch.no_grad():
            traced = torch.jit.trace(module, tuple(inputs), strict=False)
        types = [ct.TensorType(name=i.name, shape=tuple(t.shape),
                               dtype=np.int32 if not t.is_floating_point() else None)
                 for i, t in zip(spec.inputs, inputs)]
        mlmodel = ct.convert(traced, inputs=types, convert_to="mlprogram", compute_precision=ct.precision.FLOAT16,
                             minimum_deployment_target=ct.target.iOS16, skip_model_load=True)
        mlmodel.save(str(dest / "plain.mlpackage"))
        return "torch.jit.trace"

    return _timed(run)


def mlbench_export(spec: Any, dest: Path) -> Outcome:
    """mlbench's exporter, as `mlbench run` calls it."""
    from mlbench.backends.coreml.export import export_coreml
    from mlbench.sources.loading import load_model

    def run() -> str:
        model = load_model(spec, 0, ROOT)
        result = export_coreml(model.torch_module, model.example_inputs, model.input_names, precision="float16",
                               optimization=None, deployment_target="iOS16", dest=dest, inputs=list(spec.inputs))
        return result.export_path

    return _timed(run)


def select(models: str | None, limit: int | None) -> list[tuple[str, float | None]]:
    zoo = torchvision_models()
    chosen: list[tuple[str, float | None]] = []
    for token in (models or "torchvision,transformers").split(","):
        token = token.strip()
        if token == "torchvision":
            chosen += sorted(zoo.items(), key=lambda kv: kv[1])
        elif token == "transformers":
            chosen += [(name, None) for name in TRANSFORMERS]
        elif token in zoo:
            chosen.append((token, zoo[token]))
        elif token in TRANSFORMERS:
            chosen.append((token, None))
        else:
            raise SystemExit(f"unknown model {token!r}: a torchvision model under 100M parameters, one of "
                             f"{', '.join(TRANSFORMERS)}, 'torchvision' or 'transformers'")
    return chosen[:limit] if limit else chosen


def report(rows: list[Row]) -> None:
    print(f"\n{'model':28} {'params':>8}  {'plain':>6}  {'mlbench':>7}  mlbench path / reason")
    for row in rows:
        params = f"{row.params / 1e6:.1f}M" if row.params else "small"
        plain = row.plain.ok if row.plain else None
        mine = row.mlbench.ok if row.mlbench else None
        detail = row.mlbench.detail if row.mlbench else ""
        print(f"{row.name:28} {params:>8}  {'ok' if plain else 'FAIL':>6}  {'ok' if mine else 'FAIL':>7}  {detail}")
        if row.plain and not row.plain.ok:
            print(f"{'':28} {'':>8}  plain: {row.plain.detail}")
    plain_ok = sum(1 for r in rows if r.plain and r.plain.ok)
    mine_ok = sum(1 for r in rows if r.mlbench and r.mlbench.ok)
    print(f"\nplain torch.jit.trace + coremltools.convert: {plain_ok}/{len(rows)} converted")
    print(f"mlbench export_coreml:                        {mine_ok}/{len(rows)} converted")
    only_mine = [r.name for r in rows if r.mlbench and r.mlbench.ok and not (r.plain and r.plain.ok)]
    only_plain = [r.name for r in rows if r.plain and r.plain.ok and not (r.mlbench and r.mlbench.ok)]
    print(f"only mlbench: {', '.join(only_mine) or 'none'}")
    print(f"only plain:   {', '.join(only_plain) or 'none'}")


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated model names, 'torchvision' or 'transformers' (default: both)")
    parser.add_argument("--limit", type=int, help="at most this many models (in the order chosen)")
    args = parser.parse_args(argv)
    from mlbench.backends.apple.coremltools_messages import import_coremltools

    import_coremltools()  # quiet the import warnings once
    rows = [Row(name, params) for name, params in select(args.models, args.limit)]
    with tempfile.TemporaryDirectory(prefix="mlbench-zoo-") as tmp:
        for side, export in (("plain", plain_export), ("mlbench", mlbench_export)):  # plain first: see above
            for row in rows:
                dest = Path(tmp) / side / row.name
                dest.mkdir(parents=True, exist_ok=True)
                outcome = export(spec_for(row.name), dest)
                setattr(row, side, outcome)
                print(f"[{side}] {row.name}: {'ok' if outcome.ok else 'FAIL'} in {outcome.seconds:.1f} s"
                      f"{'' if outcome.ok else ' - ' + outcome.detail}", flush=True)
                for leftover in dest.glob("*"):  # keep the disk small
                    import shutil

                    shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink()
    report(rows)
    return rows


if __name__ == "__main__":
    main()
