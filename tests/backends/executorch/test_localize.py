"""ExecuTorch localization on models built so the answer is known: the program before lowering run op by op,
a flipped weight sign, a float16 overflow and the one layer 8da4w quantizes each named by module and line."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("executorch.exir", reason="the executorch extra is not installed")

from tests.backends.coreml.localize.known_models import Chain, Overflowing, flip_one_sign, line_of  # noqa: E402

pytestmark = pytest.mark.torch


class WideThenNarrow(torch.nn.Module):
    """8da4w quantizes a Linear whose input width its group size (32) divides: `wide` (64), not `narrow` (48)."""

    def __init__(self) -> None:
        super().__init__()
        self.wide = torch.nn.Linear(64, 48)
        self.narrow = torch.nn.Linear(48, 16)

    def forward(self, x):
        return self.narrow(torch.relu(self.wide(x)))  # LINE:wide_then_narrow


def _program(module, example, *, precision="float32", recipe=None):
    from mlbench.backends.executorch.export import program_before_lowering

    return program_before_lowering(module, [example], delegate="xnnpack", precision=precision, recipe=recipe)


def test_a_flipped_weight_sign_is_the_first_jump_and_carries_the_error():
    from mlbench.backends.executorch.localize_program import localize_exported

    torch.manual_seed(3)
    model, x = Chain(depth=3), torch.randn(2, 64)
    found = localize_exported(_program(flip_one_sign(model, 1), x), _program(model, x), [[x]], variant_id="v",
                              reference_label="r")
    jump = found.ops[found.first_jump]
    assert jump.origin.label == "layers.1" and jump.origin.where == f"known_models.py:{line_of('chain')}"
    assert found.ops[0].snr_db is None  # layers.0: exact
    top = found.top(1)[0]
    assert top.origin.module == "layers.1" and top.share > 0.9
    assert found.modules[0].module == "layers.1" and found.modules[0].share > 0.9
    assert found.source == "emulated" and not found.unpaired


def test_a_float16_overflow_names_the_layer_first_through_the_wrappers_casts():
    from mlbench.backends.executorch.export import HALF_PREFIX
    from mlbench.backends.executorch.localize_program import localize_exported

    torch.manual_seed(1)
    model, x = Overflowing(), torch.randn(2, 32)
    found = localize_exported(_program(model, x, precision="float16"), _program(model, x), [[x]], variant_id="v",
                              reference_label="r", prefix=HALF_PREFIX)
    jump = found.ops[found.first_jump]
    assert jump.origin.module == "big" and jump.origin.where == f"known_models.py:{line_of('overflow_big')}"
    assert jump.snr_db == -math.inf and found.output_snr_db == -math.inf
    casts = [op for op in found.ops if op.pairing == "cast"]
    assert casts[0].reference == "x" and 60 < casts[0].snr_db < 90  # the input's float16 rounding
    assert found.ops[found.first_jump - 2].origin.module == "pre" and found.ops[found.first_jump - 2].snr_db > 50


def test_only_the_layer_8da4w_quantizes_carries_the_error():
    from mlbench.backends.executorch.localize_program import localize_exported

    torch.manual_seed(0)
    model, x = WideThenNarrow(), torch.randn(4, 64)
    quantized = _program(model, x, recipe={"scheme": "8da4w", "group_size": 32})
    found = localize_exported(quantized, _program(model, x), [[x], [torch.randn(4, 64)]], variant_id="v",
                              reference_label="r")
    wide = found.modules[0]
    assert wide.module == "wide" and wide.share >= 0.9
    assert wide.where == f"test_localize.py:{line_of_here('wide_then_narrow')}"
    narrow = next(op for op in found.ops if op.origin.module == "narrow")
    assert narrow.growth_db < 3  # computed in float32 from what it is given: it adds nothing
    assert found.ops[found.first_jump].origin.module == "wide"


def line_of_here(marker: str) -> int:
    from pathlib import Path

    for number, text in enumerate(Path(__file__).read_text(encoding="utf-8").splitlines(), start=1):
        if text.rstrip().endswith(f"# LINE:{marker}"):
            return number
    raise LookupError(marker)


MODEL = (
    "import torch\n"
    "class WideThenNarrow(torch.nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.wide = torch.nn.Linear(64, 48)\n"
    "        self.narrow = torch.nn.Linear(48, 16)\n"
    "    def forward(self, x):\n"
    "        return self.narrow(torch.relu(self.wide(x)))\n"
)

PIPELINE = """\
version: 1
name: etloc
models:
  - name: two
    source: model.py:WideThenNarrow
    inputs: [{name: x, shape: [4, 64]}]
targets:
  - backend: executorch
    delegate: [xnnpack, portable]
    precision: [float16]
  - backend: executorch
    optimize: q4
optimizations:
  q4: {kind: xnnpack_quantize, scheme: 8da4w, group_size: 32}
latency: {warmup: 0, repeats: 1, min_time_s: 0.0, retry_s: 0}
verify: {samples: 2, tolerance: {float16: 1.0e-6, q4: 1.0e-6}}
cache: {dir: cache}
report: {dir: out, formats: [json]}
"""


@pytest.mark.slow
def test_a_run_localizes_xnnpack_and_portable_variants_with_the_runtimes_own_figure(tmp_path):
    pytest.importorskip("executorch.runtime", reason="the executorch runtime is not installed")
    from mlbench.backends.executorch.localize import NO_HALF_IN_ETDUMP
    from mlbench.localization import ErrorLocalization
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline

    (tmp_path / "model.py").write_text(MODEL, encoding="utf-8")
    (tmp_path / "pipeline.yaml").write_text(PIPELINE, encoding="utf-8")
    report = run(load_pipeline(tmp_path / "pipeline.yaml"))
    records = {r.variant_id.removeprefix("two/executorch/"): r for r in report.records}
    for name in ("xnnpack/float16/none", "portable/float16/none"):
        record = records[name]
        assert record.status == "failed" and "exceeds the tolerance" in record.error  # so it is localized
        assert "localization" in record.details, record.details.get("localization_error")
        found = ErrorLocalization.model_validate(record.details["localization"])
        assert found.source == "emulated" and found.notes[0].startswith("emulated: both programs run")
        assert {op.origin.label for op in found.ops if op.origin} >= {"wide", "narrow", "relu"}
        runtime = next(n for n in found.notes if n.startswith("the .pte run by ExecuTorch"))
        assert "(measured)" in runtime and name.split("/")[0] in runtime
        assert (NO_HALF_IN_ETDUMP in found.notes) == (name.startswith("portable"))  # checked: ETDump refuses Half
    quantized = ErrorLocalization.model_validate(records["xnnpack/float32/q4"].details["localization"])
    assert quantized.modules[0].module == "wide" and quantized.modules[0].share >= 0.9



def test_a_portable_programs_own_kernel_outputs_name_the_flipped_layer(tmp_path):
    pytest.importorskip("executorch.runtime", reason="the executorch runtime is not installed")
    from mlbench.backends.executorch.etdump_values import kernel_outputs, program_bytes
    from mlbench.backends.executorch.export import ETRECORD, export_pte
    from mlbench.backends.executorch.localize_program import localize_exported

    torch.manual_seed(3)
    model, x = Chain(depth=3), torch.randn(2, 64)
    flipped = flip_one_sign(model, 1)
    folder = export_pte(flipped, [x], delegate="portable", precision="float32", recipe=None, dest=tmp_path).artifact
    variant = _program(flipped, x)
    samples = [[x], [torch.randn(2, 64)]]
    measured = kernel_outputs(folder / "model.pte", folder / ETRECORD, samples, program_bytes(variant))
    assert set(measured[0]) == {"linear", "linear_1", "linear_2"}  # the ATen nodes, by the Inspector's handles
    found = localize_exported(variant, _program(model, x), samples, variant_id="v", reference_label="r",
                              measured=measured)
    assert found.source == "measured" and found.notes[-1].startswith("3 of 3 ops' values measured")
    assert found.ops[found.first_jump].origin.label == "layers.1"
    assert found.top(1)[0].origin.module == "layers.1"
    assert found.ops[0].snr_db is None or found.ops[0].snr_db > 100  # portable kernels against PyTorch's
