"""Where an exported op came from: frames of both stack formats, the user's frame outside torch, op kinds, and
module paths as the user's model names them (without mlbench's calling-convention wrapper)."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from mlbench.backends.source_frames import (  # noqa: E402
    module_path,
    op_kind,
    script_frames,
    trace_frames,
    user_frame,
    wrapper_prefix,
)

pytestmark = pytest.mark.torch
TORCH_DIR = os.path.dirname(torch.__file__)


def test_the_users_frame_is_the_innermost_outside_torch():
    stack = (f'File "/src/models.py", line 44, in forward\n    x = block(x)\n'
             f'  File "/src/models.py", line 30, in forward\n    y = self.fc(x)\n'
             f'  File "{TORCH_DIR}/nn/modules/linear.py", line 134, in forward\n    return F.linear(x)')
    assert trace_frames(stack)[0] == (f"{TORCH_DIR}/nn/modules/linear.py", 134)
    assert user_frame(trace_frames(stack)) == ("/src/models.py", 30)
    script = f"{TORCH_DIR}/nn/modules/linear.py(134): forward\n/src/models.py(30): forward\n"
    assert user_frame(script_frames(script)) == ("/src/models.py", 30)
    assert user_frame([(f"{TORCH_DIR}/x.py", 1)]) == (None, None)


def test_op_kinds_lose_namespace_overload_and_in_place_mark():
    assert [op_kind(k) for k in ("aten::relu_", "aten.linear.default", "softmax", "aten::add")] == \
        ["relu", "linear", "softmax", "add"]


def test_paths_read_as_the_wrapped_model_names_them():
    from mlbench.sources.binding import BoundModule

    bound = BoundModule(torch.nn.Linear(2, 2), None)
    assert wrapper_prefix(bound) == "module." and wrapper_prefix(torch.nn.Linear(2, 2)) == ""
    assert module_path("module.transformer.h.0", "module.") == "transformer.h.0"
    assert module_path("module", "module.") == ""
    assert module_path("encoder.layer", "") == "encoder.layer"
