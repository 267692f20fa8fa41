"""mlbench's extra Core ML converters (torch.diff, Tensor.new_ones, int() of a one-element constant): a
model using each converts by torch.jit.trace, and the package computes what eager PyTorch computes."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")


class UsesTheOps(torch.nn.Module):
    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        first = positions[:, :1] - 1
        steps = torch.diff(positions, prepend=first, dim=-1)  # diff with prepend, as transformers' mask code
        keep = positions.new_ones((), dtype=torch.bool) & (steps == 1)
        width = int(torch.tensor([x.shape[-1]]))  # int() of a one-element constant
        return keep.to(x.dtype) * x[..., :width], torch.diff(x, n=2, dim=1)


def test_the_extra_converters_match_eager(tmp_path):
    from mlbench.backends.coreml.emulate import emulate_package
    from mlbench.backends.coreml.export import EXPORT_PATH_TRACE, export_coreml

    model = UsesTheOps().eval()
    positions = torch.tensor([[0, 1, 2, 5, 6, 7, 8, 20]])
    x = torch.randn(1, 8)
    result = export_coreml(model, [positions, x], ["positions", "x"], precision="float32", optimization=None,
                           deployment_target=None, dest=tmp_path)
    assert result.export_path == EXPORT_PATH_TRACE and result.fallback_reason is None
    out = emulate_package(result.artifact, {"positions": positions.numpy().astype(np.int32), "x": x.numpy()})
    got = list((out if isinstance(out, dict) else out.outputs).values())
    expected = [t.numpy() for t in model(positions, x)]
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, atol=1e-6)
