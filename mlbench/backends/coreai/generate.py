"""A generative model on Core AI: the key/value cache as Core AI state, prefill and decode as two functions of
one asset, verified by Core AI's reference runtime, estimated per function.

The torch side is `mlbench.generate.kv_module.KVCacheLM` (the cache in registered buffers ``key_cache`` /
``value_cache``, written in place; the mask's shape carries the position). It is exported twice with
``torch.export`` — ``prefill``: ``input_ids`` [1, n] and ``causal_mask`` [1, 1, n, end], n and end dynamic up
to ``context - 1`` (one function serves every prompt length); ``decode``: [1, 1] and [1, 1, 1, end] — and both
are staged on one ``TorchConverter`` (``entrypoint_name=``, ``state_names=["key_cache", "value_cache"]``), so
the asset holds the weights once and each function declares the two states. float16 casts the program
(``cast_fp32_to_fp16``), the recipe compresses the shared weights once.

On Linux the reference runtime runs the generation in two processes: prefill over the seeded prompt from zero
states, then every decode step over eager's tokens (teacher forcing, as every backend is verified), carrying
the states it handed back (``state={...}`` per call). Its timings are the reference runtime's, never latency:
``latency.prefill`` and ``latency.decode`` are absent with the reason off macOS 27.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlbench.backends.capture import captured
from mlbench.backends.coreai.export import (
    ASSET_NAME,
    EXPORT_PATH,
    FLOAT16_CAST,
    LOGGERS,
    CoreaiExportError,
    CoreaiExportResult,
    _fail,
    clean_warnings,
    import_coreai,
    state_names,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from mlbench.backends.cached_figures import DerivedFigures
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.matrix import Variant
    from mlbench.records import Verification
    from mlbench.sources.loading import LoadedModel

FUNCTIONS = ("prefill", "decode")
GENERATE_FORMAT = "coreai-stateful-kv-v1"  # in the cache key: bump when the layout changes
INPUT_NAMES = ["input_ids", "causal_mask"]
OUTPUT_NAMES = ["logits"]
STATES = ["key_cache", "value_cache"]


def export_generation(lm: torch.nn.Module, *, context: int, precision: str, optimization: dict[str, Any] | None,
                      dest: Path) -> CoreaiExportResult:
    """Convert the causal LM `lm` with a `context`-position cache into ``dest/model.aimodel`` (functions
    ``prefill`` and ``decode``, states ``key_cache`` and ``value_cache``); CoreaiExportError in one line."""
    import torch

    from mlbench.generate.kv_module import KVCacheLM, causal_mask

    coreai_torch = import_coreai()
    started = time.perf_counter()
    sink: list[str] = []
    wrapper = KVCacheLM(lm, context).eval()
    n = torch.export.Dim("query", min=1, max=context - 1)  # torch.export guards against the full context
    end = torch.export.Dim("end", min=1, max=context - 1)
    example = min(4, context - 2)
    signatures = {
        "prefill": ((torch.zeros(1, example, dtype=torch.int64), torch.from_numpy(causal_mask(example, 0))),
                    ({1: n}, {2: n, 3: end})),
        "decode": ((torch.zeros(1, 1, dtype=torch.int64), torch.from_numpy(causal_mask(1, example))),
                   (None, {3: end})),
    }
    with captured(sink, LOGGERS, stdout=True):
        converter = coreai_torch.TorchConverter()
        for name, (args, shapes) in signatures.items():
            try:
                program = torch.export.export(wrapper, args, dynamic_shapes=shapes)
                program = program.run_decompositions(coreai_torch.get_decomp_table())
            except Exception as exc:  # noqa: BLE001 - one line per failure
                raise _fail(f"torch.export of function {name!r}", exc) from None
            if precision == "float16":
                from coreai_opt.casting import cast_fp32_to_fp16

                try:
                    program = cast_fp32_to_fp16(program)
                except Exception as exc:  # noqa: BLE001
                    raise _fail(FLOAT16_CAST, exc) from None
            found = state_names(program)
            if found != STATES:
                raise CoreaiExportError(f"function {name!r}: expected the states {STATES}, the export mutates {found}")
            try:
                converter.add_exported_program(program, input_names=INPUT_NAMES, output_names=OUTPUT_NAMES,
                                               state_names=found, entrypoint_name=name)
            except Exception as exc:  # noqa: BLE001
                raise _fail(f"coreai_torch.TorchConverter (function {name!r})", exc) from None
        try:
            ai_program = converter.to_coreai()
        except Exception as exc:  # noqa: BLE001
            raise _fail("coreai_torch.TorchConverter", exc) from None
        if optimization is not None:
            from mlbench.backends.coreai.recipes import apply

            try:
                ai_program = apply(ai_program, optimization)
            except Exception as exc:  # noqa: BLE001
                raise _fail(f"coreai-opt {optimization.get('kind')}", exc) from None
        artifact = Path(dest) / ASSET_NAME
        try:
            Path(dest).mkdir(parents=True, exist_ok=True)
            ai_program.save_asset(artifact)
        except Exception as exc:  # noqa: BLE001
            raise _fail("save_asset", exc) from None
    return CoreaiExportResult(artifact=artifact, export_path=f"{EXPORT_PATH} (KVCacheLM: prefill + decode, states)",
                              seconds=time.perf_counter() - started,
                              float16_cast=FLOAT16_CAST if precision == "float16" else None,
                              optimization=optimization, warnings=clean_warnings(sink))


def reference_generation(asset: Path, prompt: list[int], fed: list[int]) -> tuple[Any, list[Any], dict[str, Any]]:
    """Prefill over `prompt`, then one decode step per token of `fed` (eager's tokens), in Core AI's reference
    runtime: (the GreedyTrace of this asset, the two runs, what the runs left worth keeping)."""
    import numpy as np

    from mlbench.backends.coreai.reference import run_reference
    from mlbench.generate.kv_module import step_inputs
    from mlbench.generate.metrics import GreedyTrace

    ids, mask = step_inputs(prompt, 0)
    prefill = run_reference(asset, [{"input_ids": ids, "causal_mask": mask}], function="prefill")
    feeds = []
    for k, token in enumerate(fed):
        ids, mask = step_inputs([token], len(prompt) + k)
        feeds.append({"input_ids": ids, "causal_mask": mask})
    rows = [np.asarray(prefill.outputs[0][0], dtype=np.float32)[0, -1]]
    runs = [prefill]
    if feeds:
        decode = run_reference(asset, feeds, function="decode", states=prefill.states)
        rows += [np.asarray(out[0], dtype=np.float32)[0, -1] for out in decode.outputs]
        runs.append(decode)
    logits = np.stack(rows)
    trace = GreedyTrace(prompt=list(prompt), tokens=[int(np.argmax(row)) for row in logits], logits=logits)
    return trace, runs, {"seconds_by_function": {name: run.seconds for name, run in zip(FUNCTIONS, runs, strict=False)},
                         **({"exit": [r.exit_note for r in runs if r.exit_note]} if any(r.exit_note for r in runs)
                            else {})}


def kv_cache_bytes(analysis: dict[str, Any]) -> int | None:
    """Bytes of the decode function's states at their declared types and shapes (read from the asset)."""
    import re

    from mlbench.backends.coreai.analysis import type_bits

    decode = next((f for f in analysis.get("functions", []) if f["name"] == "decode"), None)
    if decode is None or not decode["states"]:
        return None
    total = 0
    for state in decode["states"]:
        match = re.match(r"NDArray \((\w+), ([\d × ]+)\)", state["type"])
        if match is None:
            return None
        elements = 1
        for dim in match.group(2).split("×"):
            elements *= int(dim.strip())
        total += elements * (type_bits(match.group(1)) or 32) // 8
    return total


def check_generation(path: Path, model: LoadedModel, variant: Variant, config: PipelineConfig
                     ) -> tuple[Verification, dict[str, Any]]:
    """The asset's generation in Core AI's reference runtime over eager's tokens, judged against eager's:
    (the verification, what the runs left worth keeping)."""
    from mlbench.generate.metrics import verify_generation
    from mlbench.generate.reference import REFERENCE_NAME, eager_generation, prompt_tokens

    assert variant.prompt is not None
    reference = eager_generation(model, variant.prompt)
    prompt = [int(t) for t in prompt_tokens(model.spec, model.seed, variant.prompt)[0]]
    trace, _, run_details = reference_generation(path, prompt, reference.fed_tokens())
    precision, optimize = variant.axis("precision"), variant.axis("optimize")
    verification = verify_generation(reference, trace, tolerance=config.verify.tolerance_for(precision, optimize),
                                     min_snr_db=config.verify.min_snr_db_for(precision, optimize),
                                     reference_name=REFERENCE_NAME, source="reference")
    return verification, run_details


def generation_measurement(analysis: dict[str, Any], model: LoadedModel, variant: Variant, verification: Verification,
                           run_details: dict[str, Any], estimated: DerivedFigures, estimate_on: list[str],
                           no_device: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The generative metrics and details of a Core AI variant on Linux, from its reference check
    (`check_generation`) and its estimates (`generate_estimate.estimate_generation`)."""
    from mlbench.generate.metrics import DECODE, PREFILL, generative_metrics, verification_metrics

    generate = model.spec.generate
    assert generate is not None and variant.prompt is not None
    metrics = generative_metrics(kv_cache_bytes=kv_cache_bytes(analysis), absent={PREFILL: no_device,
                                                                                  DECODE: no_device})
    metrics.update(verification_metrics(verification))
    details: dict[str, Any] = {
        "generate": {"prompt": variant.prompt, "new_tokens": generate.new_tokens, "context": generate.context,
                     "functions": list(FUNCTIONS), "states": STATES},
        "reference_runtime": {**run_details, "note": "time of Core AI's single-threaded CPU reference runtime on "
                              "this machine (prefill: one call; decode: each step): not latency"}}
    metrics.update(estimated.metrics)
    if estimate_on:
        details["latency_estimate"] = estimated.details
    return metrics, details
