"""Known answers: the op and module that carry the error, named with their file:line, on real exports."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("coremltools")

from tests.backends.coreml.localize.known_models import (  # noqa: E402
    Chain,
    Overflowing,
    Stack,
    Tied,
    flip_one_sign,
    line_of,
)

pytestmark = pytest.mark.torch


def _export(module, tmp_path, name, precision="float32", optimization=None, width=64):
    from mlbench.backends.coreml.export import export_coreml

    torch.manual_seed(0)
    example = torch.randn(2, width)
    return export_coreml(module.eval(), [example], ["x"], precision=precision, optimization=optimization,
                         deployment_target=None, dest=tmp_path / name).artifact, example.numpy()


def _where(marker: str) -> str:
    return f"known_models.py:{line_of(marker)}"


def test_the_trace_path_keeps_each_ops_module_and_line(tmp_path):
    from mlbench.backends.coreml.origins import package_origins

    torch.manual_seed(1)
    package, _ = _export(Stack(), tmp_path, "stack")
    by_label = {o.label: o.where for o in package_origins(package).values()}
    assert by_label["blocks.1.fc"] == _where("block_fc")  # the ModuleList's name restored
    assert by_label["blocks.2.softmax"] == _where("block_softmax")
    assert by_label["head"] == _where("stack_head")


def test_the_export_path_keeps_each_ops_module_and_line():
    import coremltools as ct

    from mlbench.backends.coreml.conversion import _convert_exported, convert_options
    from mlbench.backends.coreml.origins import ORIGINS_KEY, decode_origins

    torch.manual_seed(1)
    mlmodel = _convert_exported(ct, Stack().eval(), [torch.randn(2, 64)], ["x"],
                                convert_options(ct, "float16", "iOS16"), [])
    origins = decode_origins(mlmodel.user_defined_metadata[ORIGINS_KEY])
    by_label = {o.label: o.where for o in origins.values()}
    assert by_label["blocks.0.fc"] == _where("block_fc")
    assert by_label["blocks.0.softmax"] == _where("block_softmax")
    assert {o.module_type for o in origins.values() if o.module == "blocks.0.fc"} == {"torch.nn.modules.linear.Linear"}


def test_a_float16_overflow_is_named_first_at_its_layer(tmp_path):
    from mlbench.backends.coreml.localize import localize_packages

    torch.manual_seed(2)
    model = Overflowing()
    reference, x = _export(model, tmp_path, "f32", width=32)
    variant, _ = _export(model, tmp_path, "f16", precision="float16", width=32)
    found = localize_packages(variant, reference, [{"x": x}])
    jump = found.ops[found.first_jump]
    assert jump.origin.module == "big" and jump.origin.where == _where("overflow_big")
    assert jump.snr_db == -math.inf
    assert all(op.snr_db is None or op.snr_db > 0 for op in found.ops[: found.first_jump])  # nothing before it


def test_one_flipped_weight_sign_is_the_top_contributor_at_float32(tmp_path, capsys):
    from mlbench.backends.coreml.localize import localize_packages
    from mlbench.cli.main import main

    torch.manual_seed(3)
    model = Chain(depth=3)
    reference, x = _export(model, tmp_path, "right")
    variant, _ = _export(flip_one_sign(model, 1), tmp_path, "flipped")
    found = localize_packages(variant, reference, [{"x": x}])
    top = found.top(1)[0]
    assert top.origin.module == "layers.1" and top.origin.where == _where("chain")
    assert top.share > 0.99
    assert found.ops[found.first_jump].origin.module == "layers.1"
    assert found.ops[0].snr_db is None  # layers.0 computes exactly what the reference computes
    assert found.modules[0].module == "layers.1"
    capsys.readouterr()
    assert main(["inspect", str(variant), "--against", str(reference)]) == 0  # the same, from the command line
    printed = capsys.readouterr().out
    assert f"**First op where the error jumps:** `layers.1 ({_where('chain')})`" in printed


def test_the_one_palettized_layer_carries_the_error(tmp_path):
    from mlbench.backends.coreml.localize import localize_packages

    torch.manual_seed(4)
    model = Chain(depth=2)
    reference, x = _export(model, tmp_path, "f32")
    recipe = {"kind": "palettize", "nbits": 2, "exclude": ["layers.1"]}
    variant, _ = _export(model, tmp_path, "pal", precision="float16", optimization=recipe)
    found = localize_packages(variant, reference, [{"x": x}])
    modules = {m.module: m for m in found.modules}
    assert modules["layers.0"].share >= 0.9
    assert modules["layers.1"].share < 0.05
    assert found.modules[0].module == "layers.0" and found.modules[0].where == _where("chain")


def test_excluding_a_module_the_model_lacks_says_which_it_has(tmp_path):
    from mlbench.backends.coreml.deployment import InvalidExportOptions

    with pytest.raises(InvalidExportOptions, match=r"^palettize exclude 'layers\.9' names no module of the model "
                       r"\(modules: layers\.0, layers\.1\)$"):
        _export(Chain(depth=2), tmp_path, "bad", optimization={"kind": "palettize", "nbits": 4,
                                                                 "exclude": ["layers.9"]})


def test_excluding_one_reader_of_a_tied_weight_leaves_the_other_uncompressed_too(tmp_path):
    from mlbench.backends.coreml.emulate import load_program
    from mlbench.backends.coreml.export import export_coreml

    torch.manual_seed(5)
    ids = torch.randint(0, 64, (1, 8), dtype=torch.int32)
    result = export_coreml(Tied().eval(), [ids], ["ids"], precision="float16", deployment_target=None,
                           optimization={"kind": "palettize", "nbits": 4, "exclude": ["out"]}, dest=tmp_path / "tied")
    assert not [op for op in load_program(result.artifact).main.ops if op.type.startswith("constexpr_")]
    assert any(w.startswith("exclude also leaves") and "share the weight" in w for w in result.warnings)
