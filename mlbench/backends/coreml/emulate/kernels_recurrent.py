"""Recurrent kernels: MIL's ``lstm``, ``gru`` and ``rnn`` (time-major inputs ``[seq, batch, in]``).

Gate layouts follow the MIL op definitions (coremltools ``ops/defs/iOS15/recurrent.py``):
lstm weights stack the gates as input, forget, output, cell (``ifoz``); gru as reset, output,
update (``roz``), with the reset gate applied to ``h`` before ``W_ho`` (iOS15; the op doc's
``r * W_ho h`` reads otherwise, but coremltools' numpy reference in its iOS14 op tests computes
``W_ho (r * h)``) or, with ``reset_after`` (iOS18), to ``W_ho h + b_ho``. lstm's ``clip`` bounds
the cell state ``c_t`` (that reference again; the doc says "cell gate"). coremltools converts torch's GRU to a while loop instead,
because torch's GRU applies the reset gate after its hidden bias.

With ``direction="reverse"`` the output sequence is in the order the steps are computed (its first
entry follows ``x[-1]``), as coremltools' op tests expect (torch run on the flipped input); the backward
half of a bidirectional lstm is aligned with the input instead (its entry t follows ``x[t]``).
"""

from __future__ import annotations

from typing import Any

import torch

from mlbench.backends.coreml.emulate.registry import KernelError, as_bool, as_float, as_str, kernel


def _activation(name: str):
    name = as_str(name)
    table = {
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
        "relu": torch.relu,
        "linear": lambda v: v,
        "hard_sigmoid": lambda v: torch.clamp(0.2 * v + 0.5, 0.0, 1.0),
        "scaled_tanh": lambda v: torch.tanh(v),
    }
    if name not in table:
        raise KernelError(f"recurrent activation {name!r} is not implemented")
    return table[name]


def _lstm_direction(x, h, c, w_ih, w_hh, bias, peephole, reverse, f_rec, f_cell, f_act, clip):
    hidden = w_hh.shape[1]
    x_proj = torch.matmul(x, w_ih.t())  # all steps at once
    if bias is not None:
        x_proj = x_proj + bias
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    outputs: list[Any] = [None] * x.shape[0]
    p_i = p_f = p_o = None
    if peephole is not None:
        p_i, p_f, p_o = peephole[:hidden], peephole[hidden:2 * hidden], peephole[2 * hidden:]
    for t in steps:
        gates = x_proj[t] + torch.matmul(h, w_hh.t())
        gi, gf, go, gz = gates.split(hidden, dim=-1)
        if p_i is not None:
            gi, gf = gi + p_i * c, gf + p_f * c
        i, f, z = f_rec(gi), f_rec(gf), f_cell(gz)
        c = f * c + i * z
        if clip is not None:  # the cell state, as coremltools' reference (iOS14 test_recurrent) clips it
            c = torch.clamp(c, -clip, clip)
        if p_o is not None:
            go = go + p_o * c
        h = f_rec(go) * f_act(c)
        outputs[t] = h
    return torch.stack(outputs), h, c


@kernel("lstm")
def lstm(x, initial_h, initial_c, weight_ih, weight_hh, bias=None, peephole=None, weight_ih_back=None,
         weight_hh_back=None, bias_back=None, peephole_back=None, direction="forward", output_sequence=False,
         recurrent_activation="sigmoid", cell_activation="tanh", activation="tanh", clip=None, **_):
    acts = (_activation(recurrent_activation), _activation(cell_activation), _activation(activation))
    clip = as_float(clip) if clip is not None else None
    direction = as_str(direction)
    hidden = weight_hh.shape[1]
    h0, c0 = initial_h.reshape(x.shape[1], -1), initial_c.reshape(x.shape[1], -1)
    if direction == "bidirectional":
        fwd = _lstm_direction(x, h0[:, :hidden], c0[:, :hidden], weight_ih, weight_hh, bias, peephole, False,
                              *acts, clip)
        bwd = _lstm_direction(x, h0[:, hidden:], c0[:, hidden:], weight_ih_back, weight_hh_back, bias_back,
                              peephole_back, True, *acts, clip)
        seq = torch.cat([fwd[0], bwd[0]], dim=-1)
        h, c = torch.cat([fwd[1], bwd[1]], dim=-1), torch.cat([fwd[2], bwd[2]], dim=-1)
        last = torch.cat([fwd[0][-1:], bwd[0][:1]], dim=-1)
    else:
        reverse = direction == "reverse"
        seq, h, c = _lstm_direction(x, h0, c0, weight_ih, weight_hh, bias, peephole, reverse, *acts, clip)
        seq = seq.flip(0) if reverse else seq  # one reverse direction: outputs in the order computed
        last = h.unsqueeze(0)
    return (seq if as_bool(output_sequence) else last), h, c


@kernel("gru")
def gru(x, initial_h, weight_ih, weight_hh, bias=None, direction="forward", output_sequence=False,
        recurrent_activation="sigmoid", activation="tanh", reset_after=False, input_bias=None, **_):
    f_rec, f_act = _activation(recurrent_activation), _activation(activation)
    hidden = weight_hh.shape[1]
    reverse = as_str(direction) == "reverse"
    h = initial_h.reshape(x.shape[1], -1)
    x_proj = torch.matmul(x, weight_ih.t())
    if input_bias is not None:
        x_proj = x_proj + input_bias
    b_r, b_o, b_z = (bias.split(hidden) if bias is not None else (0.0, 0.0, 0.0))
    outputs: list[Any] = [None] * x.shape[0]
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    after = as_bool(reset_after)
    for t in steps:
        xr, xo, xz = x_proj[t].split(hidden, dim=-1)
        w_r, w_o, w_z = weight_hh.split(hidden)
        r = f_rec(xr + torch.matmul(h, w_r.t()) + b_r)
        z = f_rec(xz + torch.matmul(h, w_z.t()) + b_z)
        if after:  # iOS18: r * (W_ho h + b_ho)
            o = f_act(xo + r * (torch.matmul(h, w_o.t()) + b_o))
        else:  # r applied to h before W_ho, as coremltools' numpy reference (iOS14 test_recurrent) does
            o = f_act(xo + torch.matmul(r * h, w_o.t()) + b_o)
        h = (1 - z) * o + z * h
        outputs[t] = h
    seq = torch.stack(outputs).flip(0) if reverse else torch.stack(outputs)  # reverse: in the order computed
    return (seq if as_bool(output_sequence) else h.unsqueeze(0)), h


@kernel("rnn")
def rnn(x, initial_h, weight_ih, weight_hh, bias=None, direction="forward", output_sequence=False,
        activation="tanh", **_):
    f_act = _activation(activation)
    reverse = as_str(direction) == "reverse"
    h = initial_h.reshape(x.shape[1], -1)
    x_proj = torch.matmul(x, weight_ih.t())
    if bias is not None:
        x_proj = x_proj + bias
    outputs: list[Any] = [None] * x.shape[0]
    for t in (range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])):
        h = f_act(x_proj[t] + torch.matmul(h, weight_hh.t()))
        outputs[t] = h
    seq = torch.stack(outputs).flip(0) if reverse else torch.stack(outputs)  # reverse: in the order computed
    return (seq if as_bool(output_sequence) else h.unsqueeze(0)), h
