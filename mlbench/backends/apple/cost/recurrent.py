"""Recurrent families: lstm, gru, rnn, over the whole sequence.

For x [T, B, I], hidden size H and G gates (lstm 4, gru 3, rnn 1), per direction:

    FLOPs = T · B · (2·G·H·(I + H)          input and recurrent matmuls (2 x MACs)
                     + G·H per bias          bias adds
                     + H · gate math)        the elementwise part per hidden unit

gate math per hidden unit, activations counted as in ``RECURRENT_ACTIVATION_FLOPS``
(sigmoid 4, tanh 5):

* lstm: 3 x recurrent_activation (input, forget, output gates) + cell_activation (the
  candidate) + activation (of the cell) + 4 (c = f·c + i·g: 3; h = o·act(c): 1), + 6 with
  peepholes (3 multiplies, 3 adds);
* gru: 2 x recurrent_activation (update, reset gates) + activation (candidate) + 5
  (r·(W h), 1 - z, (1 - z)·n, z·h, add);
* rnn: activation.

``direction: bidirectional`` doubles it. The state carried between time steps is not counted
as memory traffic (it stays on chip); bytes follow the module convention (x, weights as
stored, the outputs).
"""

from __future__ import annotations

from mlbench.backends.apple.cost.base import OpCost, OpDescription, register, with_flops
from mlbench.backends.apple.cost.elementwise import RECURRENT_ACTIVATION_FLOPS

GATES = {"lstm": 4, "gru": 3, "rnn": 1}
_DEFAULT_ACTIVATIONS = {"recurrent_activation": "sigmoid", "cell_activation": "tanh", "activation": "tanh"}


def _activation(desc: OpDescription, name: str) -> int | None:
    value = desc.attr(name, _DEFAULT_ACTIVATIONS[name])
    if isinstance(value, list):
        value = value[0] if value else None
    return RECURRENT_ACTIVATION_FLOPS.get(str(value).lower())


def gate_math(desc: OpDescription) -> int | None:
    """Elementwise FLOPs per hidden unit and time step, one direction."""
    act = _activation(desc, "activation")
    if desc.op_type == "rnn":
        return act
    rec = _activation(desc, "recurrent_activation")
    if act is None or rec is None:
        return None
    if desc.op_type == "gru":
        return 2 * rec + act + 5
    cell = _activation(desc, "cell_activation")
    if cell is None:
        return None
    return 3 * rec + cell + act + 4 + (6 if desc.input("peephole") is not None else 0)


def recurrent_flops(desc: OpDescription) -> int | None:
    x, w_hh = desc.shape("x"), desc.shape("weight_hh")
    if not x or len(x) != 3 or not w_hh or len(w_hh) != 2:
        return None
    steps, batch, features = x
    hidden = w_hh[1]
    math = gate_math(desc)
    if None in (steps, batch, features, hidden) or math is None:
        return None
    gh = GATES[desc.op_type] * hidden  # type: ignore[operator]
    biases = sum(desc.input(b) is not None for b in ("bias", "input_bias"))
    per_step = 2 * gh * (features + hidden) + biases * gh + hidden * math  # type: ignore[operator]
    direction = desc.attr("direction", "forward")
    if isinstance(direction, list):
        direction = direction[0] if direction else "forward"
    directions = 2 if str(direction).lower() == "bidirectional" else 1
    return directions * steps * batch * per_step  # type: ignore[operator]


@register("lstm", "gru", "rnn")
def recurrent(desc: OpDescription) -> OpCost:
    return with_flops(desc, recurrent_flops(desc))
