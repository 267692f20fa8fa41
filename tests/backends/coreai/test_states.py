"""States and two functions in one Core AI asset, with the real packages: a KV-cache-like buffer mutated in
`forward` becomes a state of its function, a second entry point shares the asset, the summary lists both with
the state, and Core AI's reference runtime runs each, carrying the state from call to call."""

from __future__ import annotations

import numpy as np
import pytest

from mlbench.backends.coreai.availability import unavailable

pytestmark = [pytest.mark.torch, pytest.mark.coreai,
              pytest.mark.skipif(unavailable() is not None, reason=f"needs Core AI: {unavailable()}")]

torch = pytest.importorskip("torch")


class Decode(torch.nn.Module):
    """One decoding step: project the token and write it into the cache at `pos`; return the cache's sum."""

    def __init__(self, proj: torch.nn.Linear) -> None:
        super().__init__()
        self.proj = proj
        self.register_buffer("kv_cache", torch.zeros(1, 4, 8))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.kv_cache.index_copy_(1, pos, self.proj(x))
        return self.kv_cache.sum(dim=1)


class Encode(torch.nn.Module):
    """A second entry point sharing the projection, without state."""

    def __init__(self, proj: torch.nn.Linear) -> None:
        super().__init__()
        self.proj = proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.proj(x))


@pytest.fixture(scope="module")
def asset(tmp_path_factory):
    from mlbench.backends.coreai.functions import FunctionSpec, export_functions

    torch.manual_seed(0)
    proj = torch.nn.Linear(8, 8)
    x = torch.randn(1, 1, 8)
    result = export_functions([
        FunctionSpec("decode", Decode(proj), [x, torch.tensor([0])], ["x", "pos"], ["total"]),
        FunctionSpec("encode", Encode(proj), [x], ["x"], ["y"]),
    ], tmp_path_factory.mktemp("states"))
    return result.artifact, proj


def test_summary_lists_both_functions_and_the_state(asset):
    from mlbench.backends.coreai.analysis import analyse_asset, render_asset_markdown

    analysis = analyse_asset(asset[0])
    functions = {f["name"]: f for f in analysis["functions"]}
    assert sorted(functions) == ["decode", "encode"]
    assert functions["decode"]["states"] == [{"name": "kv_cache", "type": "NDArray (Float32, 1 × 4 × 8)"}]
    assert [i["name"] for i in functions["decode"]["inputs"]] == ["x", "pos"]
    assert functions["encode"]["states"] == []
    assert [o["name"] for o in functions["encode"]["outputs"]] == ["y"]
    assert "| `decode` | `x` NDArray (Float32, 1 × 1 × 8), `pos` NDArray (Int32, 1) | `total` " in \
        render_asset_markdown(analysis, title="t")
    from mlbench.backends.coreai.report import functions_cell

    assert functions_cell(analysis) == "`decode` (`kv_cache`), `encode`"


def test_single_function_export_names_the_state_after_its_buffer(tmp_path):
    from mlbench.backends.coreai.analysis import analyse_asset
    from mlbench.backends.coreai.export import export_coreai

    result = export_coreai(Decode(torch.nn.Linear(8, 8)), [torch.zeros(1, 1, 8), torch.tensor([1])], ["x", "pos"],
                           ["total"], precision="float32", optimization=None, dest=tmp_path)
    (main,) = analyse_asset(result.artifact)["functions"]
    assert main["name"] == "main"
    assert [s["name"] for s in main["states"]] == ["kv_cache"]  # not the FX placeholder's b_kv_cache


def test_reference_runtime_carries_the_state_from_call_to_call(asset):
    from mlbench.backends.coreai.reference import run_reference

    path, proj = asset
    rng = np.random.default_rng(1)
    tokens = [rng.standard_normal((1, 1, 8)).astype(np.float32) for _ in range(3)]
    eager = Decode(proj).eval()
    with torch.no_grad():
        expected = [eager(torch.from_numpy(t), torch.tensor([i])).numpy() for i, t in enumerate(tokens)]
    run = run_reference(path, [{"x": t, "pos": np.array([i])} for i, t in enumerate(tokens)], function="decode")
    assert run.output_names == ["total"]
    for got, want in zip(run.outputs, expected, strict=True):
        np.testing.assert_allclose(got[0], want, atol=1e-5)
    assert sorted(run.states) == ["kv_cache"]
    np.testing.assert_allclose(run.states["kv_cache"], eager.kv_cache.numpy(), atol=1e-5)
    # a given starting state replaces the zeros: the step then adds the token to what the cache held
    start = np.ones((1, 4, 8), np.float32)
    again = run_reference(path, [{"x": tokens[0], "pos": np.array([3])}], function="decode",
                          states={"kv_cache": start})
    with torch.no_grad():
        want = start[0, :3].sum(axis=0) + proj(torch.from_numpy(tokens[0]))[0, 0].numpy()
    np.testing.assert_allclose(again.outputs[0][0][0], want, atol=1e-5)


def test_second_function_runs_without_state(asset):
    from mlbench.backends.coreai.reference import run_reference

    path, proj = asset
    x = np.random.default_rng(2).standard_normal((1, 1, 8)).astype(np.float32)
    run = run_reference(path, [{"x": x}], function="encode")
    with torch.no_grad():
        np.testing.assert_allclose(run.outputs[0][0], torch.relu(proj(torch.from_numpy(x))).numpy(), atol=1e-5)
    assert run.states == {}


def test_repeated_function_names_are_refused(tmp_path):
    from mlbench.backends.coreai.export import CoreaiExportError
    from mlbench.backends.coreai.functions import FunctionSpec, export_functions

    proj = torch.nn.Linear(8, 8)
    spec = FunctionSpec("main", Encode(proj), [torch.zeros(1, 1, 8)], ["x"], ["y"])
    with pytest.raises(CoreaiExportError) as err:
        export_functions([spec, spec], tmp_path)
    assert str(err.value) == "function names must be distinct: main given more than once"
