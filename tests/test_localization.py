"""The localization's figures and decisions, without torch: error sums, growth, the first jump, when a run
localizes, and the JSON round trip of not-finite figures."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mlbench.localization import (
    ErrorLocalization,
    ErrorSum,
    OpError,
    OpOrigin,
    as_record,
    first_jump,
    growth_db,
    needs_localization,
)
from mlbench.records import Verification


def _op(index, snr, growth, module="m"):
    return OpError(index=index, name=f"op{index}", op_type="linear", pairing="name", snr_db=snr, growth_db=growth,
                   origin=OpOrigin(module=module, op="linear"))


def test_error_sum_gives_relative_error_and_snr_over_samples():
    sums = ErrorSum()
    sums.add(np.array([1.1, 2.0]), np.array([1.0, 2.0]))
    sums.add(np.array([0.0]), np.array([0.0]))
    assert sums.rel_error == pytest.approx(math.sqrt(0.01 / 5.0))
    assert sums.snr_db == pytest.approx(-20 * math.log10(math.sqrt(0.01 / 5.0)))
    exact = ErrorSum()
    exact.add(np.ones(3), np.ones(3))
    assert exact.snr_db is None
    overflow = ErrorSum()
    overflow.add(np.array([np.inf, 1.0]), np.array([1.0, 1.0]))
    assert overflow.snr_db == -math.inf


def test_growth_counts_an_exact_input_as_300_db_and_an_overflow_as_everything():
    assert growth_db([None, 50.0], 40.0) == 10.0
    assert growth_db([None], 40.0) == 260.0
    assert growth_db([40.0], None) is None
    assert growth_db([40.0], -math.inf) == math.inf


def test_the_first_jump_is_the_first_big_loss_near_the_outputs_error():
    ops = [_op(0, 70.0, 230.0), _op(1, 12.0, 58.0, "layer.1"), _op(2, 10.0, 2.0)]
    assert first_jump(ops, 10.0) == 1  # op 0 lost much, but its SNR is far above the output's
    assert first_jump([_op(0, 70.0, 1.0), _op(1, -math.inf, math.inf)], -math.inf) == 1
    assert first_jump([_op(0, 12.0, 1.0), _op(1, 11.0, 1.0)], 10.0) is None  # gradual


def test_a_run_localizes_failures_and_passes_within_the_factor():
    def verification(max_rel, snr, passed=True):
        return Verification(reference="r", max_abs=max_rel, max_rel=max_rel, tolerance=0.01, min_snr_db=30.0,
                            passed=passed, outputs=[], snr_db=snr)

    assert needs_localization(verification(0.5, 5.0, passed=False), 2.0)
    assert needs_localization(verification(0.006, 60.0), 2.0)  # max_rel past half the tolerance
    assert needs_localization(verification(0.001, 35.0), 2.0)  # SNR within 6 dB of the floor
    assert not needs_localization(verification(0.001, 40.0), 2.0)


def test_an_overflows_snr_survives_the_records_json():
    found = ErrorLocalization(variant="v", backend="coreml", reference="r", source="emulated", samples=1, seconds=0.1,
                              output_snr_db=-math.inf, ops=[_op(0, -math.inf, math.inf)], first_jump=0)
    stored = json.loads(json.dumps(as_record(found)))
    back = ErrorLocalization.model_validate(stored)
    assert back.output_snr_db == -math.inf and back.ops[0].growth_db == math.inf


def test_an_origin_reads_as_module_and_line():
    layer = OpOrigin(module="encoder.fc", module_type="torch.nn.modules.linear.Linear", op="linear",
                     file="/src/models.py", line=88)
    inside = OpOrigin(module="encoder.layer.3.attention", module_type="models.Attention", op="softmax",
                      file="/src/models.py", line=91)
    assert layer.described == "encoder.fc (models.py:88)"
    assert inside.described == "encoder.layer.3.attention.softmax (models.py:91)"
    assert OpOrigin(module="", op="relu").described == "relu"
