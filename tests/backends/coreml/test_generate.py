"""Core ML generation: the cache as state and prefill/decode as two functions of one package, run by the
interpreter (state carried across calls, a named function), estimated per chip, measured through a fake
coremltools' MLState, and a pipeline where one export serves two prompt lengths."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("coremltools")

from mlbench.generate.eager import full_forward_logits  # noqa: E402
from mlbench.generate.kv_module import tiny_causal_lm  # noqa: E402

LLAMA = {"hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 64}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from mlbench.backends.coreml.generate.export import export_generation

    lm = tiny_causal_lm("llama", **LLAMA)
    result = export_generation(lm, context=32, precision="float32", optimization=None,
                               dest=tmp_path_factory.mktemp("coreml-gen") / "generation")
    return lm, result


def test_one_multifunction_package_with_the_cache_as_fp16_state(exported):
    from mlbench.backends.coreml.emulate import load_program

    _lm, result = exported
    assert (result.layout, result.layout_reason) == ("multifunction", None)
    assert sorted(p.name for p in result.folder.iterdir()) == ["model.mlpackage"]
    for function in ("prefill", "decode"):
        program = load_program(result.folder / "model.mlpackage", function)
        assert program.function == function and program.input_names == ["input_ids", "causal_mask"]
        assert [(n, i.dtype, i.shape) for n, i in program.states] == [
            ("key_cache", "fp16", (1, 1, 2, 32, 16)), ("value_cache", "fp16", (1, 1, 2, 32, 16))]
    assert result.state_shapes == {"key_cache": [1, 1, 2, 32, 16], "value_cache": [1, 1, 2, 32, 16]}


def test_one_export_serves_two_prompt_lengths_with_a_full_forwards_logits(exported):
    from mlbench.backends.coreml.generate.run import emulated_generator

    lm, result = exported
    generator = emulated_generator(result.folder)
    for length in (5, 20):
        prompt = np.random.default_rng(length).integers(0, 100, size=length).tolist()
        trace = generator.generate(prompt, new_tokens=4)
        want = full_forward_logits(lm, prompt + trace.tokens[:-1])[length - 1:]
        assert trace.tokens == [int(r.argmax()) for r in want]  # greedy tokens agree at float32
        # the cache is float16 state (coremltools converts no other), so keys and values carry its rounding
        assert np.abs(trace.logits - want).max() / np.abs(want).max() < 5e-3, length
        assert generator.length == length + 4


def test_estimates_grow_with_the_prompt_and_the_position(exported):
    from mlbench.backends.apple.analysis import analyse_package
    from mlbench.backends.apple.generate_estimate import generation_estimates, pin_shapes
    from mlbench.backends.apple.placement import estimate_placement

    _lm, result = exported
    package = result.folder / "model.mlpackage"
    functions = {}
    for name in ("prefill", "decode"):
        analysis = analyse_package(package, name)
        functions[name] = (analysis, estimate_placement(analysis, "all"))
    decode = functions["decode"][0]
    linear = next(layer for layer in pin_shapes(functions["prefill"][0], 7, 7, 16).layers
                  if layer.op_type == "linear")
    assert linear.flops == 2 * linear.params * 7
    attention = [layer for layer in pin_shapes(decode, 1, 10, 16).layers if layer.op_type == "matmul"]
    assert [layer.flops for layer in attention] == [2 * 4 * 10 * 16, 2 * 4 * 16 * 10]  # Q·Kᵀ, then ·V
    # an op with no dimension known (the tile repeating grouped key/value heads) is sized by its input, not
    # by taking every dimension as the position (10**5 elements, 800 kB at float32); the largest op is then
    # the LM head (64 × 100 float32 weights)
    pinned = pin_shapes(decode, 1, 10, 16).layers
    assert max(pinned, key=lambda layer: layer.bytes or 0).op_type == "linear"
    assert max(layer.bytes or 0 for layer in pinned) < 64 * 100 * 4 * 1.1
    short, _ = generation_estimates(functions, ["m1"], prompt=4, new_tokens=4, head_dim=16)
    long, parts = generation_estimates(functions, ["m1"], prompt=24, new_tokens=4, head_dim=16)
    assert long["latency.estimated.prefill.m1"].value > short["latency.estimated.prefill.m1"].value
    assert long["latency.estimated.decode.m1"].value >= short["latency.estimated.decode.m1"].value
    assert long["latency.estimated.decode.m1"].source == "estimated" and long["latency.estimated.decode.m1"].band
    assert parts["m1"]["decode"]["positions"] == [25, 28]


@pytest.mark.slow
def test_fused_attention_exports_one_op_whose_estimate_reads_the_cache_and_not_the_scores(tmp_path):
    from mlbench.backends.apple.analysis import analyse_package
    from mlbench.backends.apple.generate_estimate import ATTENTION_POINTWISE_FLOPS, pin_shapes
    from mlbench.backends.coreml.generate.export import export_generation

    lm = tiny_causal_lm("llama", **LLAMA)
    result = export_generation(lm, context=32, precision="float16", optimization=None, dest=tmp_path / "generation",
                               attention="sdpa")
    decode = analyse_package(result.folder / "model.mlpackage", "decode")
    assert decode.op_counts.get("scaled_dot_product_attention") == 1 and "softmax" not in decode.op_counts
    fused = next(x for x in pin_shapes(decode, 1, 10, 16).layers if x.op_type == "scaled_dot_product_attention")
    assert fused.flops == 4 * 10 * (4 * 16 + ATTENTION_POINTWISE_FLOPS)  # 4 heads, 1 query, 10 positions
    # query and output (4 heads × 16), key and value over the 10 positions, the mask row: float16
    assert fused.bytes == 2 * (2 * 4 * 16 + 2 * 4 * 10 * 16 + 10)


class FakeStatefulCoremltools(types.ModuleType):
    """coremltools' macOS calls for a stateful multifunction model, answered by mlbench's interpreter."""

    def __init__(self, package: Path) -> None:
        super().__init__("coremltools")
        self.__version__ = "9.0"
        self.calls: list[tuple] = []
        self.ComputeUnit = SimpleNamespace(ALL="ALL", CPU_ONLY="CPU_ONLY")
        calls = self.calls

        def compile_model(path: str, dest: str) -> str:
            calls.append(("compile_model", path))
            Path(dest).mkdir(parents=True)
            return dest

        class CompiledMLModel:
            def __init__(self, path: str, compute_units: str, function_name: str | None = None) -> None:
                from mlbench.backends.coreml.emulate import Emulator, load_program

                calls.append(("CompiledMLModel", Path(path).name, compute_units, function_name))
                self.emulator = Emulator(load_program(package, function_name))

            def make_state(self):
                calls.append(("make_state",))
                return self.emulator.make_state()

            def predict(self, data: dict, state=None) -> dict:
                assert state is not None, "a stateful model is predicted with its state"
                return self.emulator.run(data, state)

        self.models = SimpleNamespace(CompiledMLModel=CompiledMLModel, utils=SimpleNamespace(compile_model=compile_model))


def test_measured_through_mlstate_with_a_fake_coremltools(exported, monkeypatch):
    from mlbench.backends.coreml.generate.run import measure_generation
    from mlbench.config.pipeline import PipelineConfig
    from mlbench.generate.eager import causal_lm
    from mlbench.matrix import Variant
    from mlbench.sources.loading import load_model

    lm, result = exported
    config = PipelineConfig.model_validate({
        "version": 1, "name": "fake", "targets": [{"backend": "coreml"}],
        "models": [{"name": "llama", "source": "transformers:LlamaForCausalLM", "kwargs": {"config": LLAMA},
                    "generate": {"prompt": [6], "new_tokens": 3, "context": 32},
                    "inputs": [{"name": "input_ids", "shape": [1, 6], "dtype": "int64", "range": [0, 100]}]}],
        "latency": {"warmup": 1, "repeats": 3, "min_time_s": 0.0}})
    model = load_model(config.models[0], seed=0, base_dir=Path.cwd())
    causal_lm(model.torch_module, "llama").load_state_dict(lm.state_dict())  # the exported weights
    ct = FakeStatefulCoremltools(result.folder / "model.mlpackage")
    monkeypatch.setitem(sys.modules, "coremltools", ct)
    variant = Variant(model="llama", backend="coreml", target_index=0, artifact_axes=("precision", "optimize"),
                      fixed="{}", axes=(("precision", "float32"), ("compute_units", "all"), ("optimize", "none"),
                                        ("prompt", "p6")))
    measured = measure_generation(result.folder, model, variant, config, kv_cache_bytes=8192)
    assert [c for c in ct.calls if c[0] == "compile_model"] == [("compile_model", str(result.folder / "model.mlpackage"))]
    assert [c[3] for c in ct.calls if c[0] == "CompiledMLModel"] == ["prefill", "decode"]
    assert measured.metrics["latency.prefill"].source == "measured"
    assert len(measured.metrics["latency.decode"].samples) == 3  # one timed round of 3 decode steps
    assert measured.metrics["memory.kv_cache"].value == 8192
    assert measured.metrics["verify.token_agreement"].value == 1.0
    assert measured.verify is not None and measured.verify.source == "measured"


PIPELINE = """\
version: 1
name: gen
models:
  - name: llama
    source: transformers:LlamaForCausalLM
    kwargs: {{config: {llama}}}
    generate: {{prompt: [8, 20], new_tokens: 4, context: 32}}
    inputs:
      - {{name: input_ids, shape: [1, 8], dtype: int64, range: [0, 100]}}
targets:
  - backend: coreml
    precision: [float32]
    estimate_on: [m1]
latency: {{warmup: 1, repeats: 4, min_time_s: 0.0, retry_s: 0}}
cache: {{dir: cache}}
history: {{enabled: false}}
report: {{dir: out, formats: [json, markdown]}}
"""


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the Linux path (estimated and emulated)")
@pytest.mark.slow  # past 10 s on a quiet 2-core machine: out of the fast lane
def test_a_pipeline_exports_once_and_reports_emulated_and_estimated_generation(tmp_path):
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline

    path = tmp_path / "gen.yaml"
    path.write_text(PIPELINE.format(llama=json.dumps(LLAMA).replace('"', "")), encoding="utf-8")
    report = run(load_pipeline(path), jobs=1)
    records = {r.variant_id: r for r in report.records}
    short, long = records["llama/coreml/float32/all/none/p8"], records["llama/coreml/float32/all/none/p20"]
    for record in (short, long):
        assert record.status == "ok", record.error
        assert record.metrics["verify.token_agreement"].value == 1.0
        assert record.metrics["verify.token_agreement"].source == "emulated"
        assert record.metrics["latency.prefill"].value is None
        assert record.metrics["latency.prefill"].reason.startswith("Core ML runs only on macOS")
        assert record.metrics["memory.kv_cache"].value == 2 * 1 * 2 * 32 * 16 * 2  # k and v, fp16 state
        assert record.metrics["latency.estimated.decode.m1"].source == "estimated"
    assert short.artifact.key == long.artifact.key  # one export serves both prompt lengths
    assert (long.metrics["latency.estimated.prefill.m1"].value > short.metrics["latency.estimated.prefill.m1"].value)
