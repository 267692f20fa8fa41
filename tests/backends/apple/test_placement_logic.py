"""Core ML placement estimates on hand-built program analyses: every branch of the rules, exactly.

Fast (nothing is exported): the cover that benchmarks/mutation.py runs against the placement modules.
tests/test_coreml_placement*.py check the same rules on real exported packages.
"""

from __future__ import annotations

import pytest

from mlbench.backends.apple.analysis import LayerInfo, ProgramAnalysis, TensorDescription, Totals
from mlbench.backends.apple.placement import (
    ESTIMATE_CAVEAT,
    ane_blocker,
    count_switches,
    estimate_placement,
    fractions,
    is_data_op,
    normalise_op_type,
    summarise,
)
from mlbench.backends.apple.placement_rules import (
    ProgramContext,
    Rule,
    load_rules,
    lowest_confidence,
    os_level,
    rule_table,
)
from mlbench.records import OpPlacement

FP32_REASON = "A float32 program never runs on the Neural Engine."
FLOAT32_NOTE = ("No operation reached the Neural Engine because the program is float32: Core ML runs only float16 "
                "programs there. Export with `precision: float16` to use it.")
RECURRENT = "recurrent layers do not run on the Neural Engine"


def layer(op_type: str, i: int = 0, dtype: str = "fp16", shape: list | None = None, **attributes) -> LayerInfo:
    return LayerInfo(name=f"{op_type}_{i}", op_type=op_type, output_dtype=dtype,
                     output_shape=shape if shape is not None else [1, 64, 32, 32], attributes=attributes)


def program(layers: list[LayerInfo], precision: str = "FLOAT16", *, flops: int | None = 10**9,
            weight_bytes: int | None = 0, opset_os: str | None = None, min_os: str | None = None,
            flexible: bool = False, const_count: int = 3, weight_ops: dict | None = None) -> ProgramAnalysis:
    inputs = [TensorDescription(name="x", kind="tensor", shape=[1, None] if flexible else [1, 8], dtype="fp16", flexible=flexible)]
    return ProgramAnalysis(path="x.mlpackage", model_type="mlProgram", spec_version=8, precision=precision,
                           opset_os=opset_os, min_os=min_os, op_counts={}, const_count=const_count,
                           weight_ops=weight_ops or {}, layers=layers, package_size_bytes=1, inputs=inputs, outputs=[],
                           totals=Totals(compute_ops=len(layers), const_ops=const_count, weight_ops=0, params=0,
                                         weight_bytes=weight_bytes, macs=0, flops=flops, macs_complete=True))


def convs(n: int, dtype: str = "fp16") -> list[LayerInfo]:
    return [layer("conv" if i % 2 == 0 else "relu", i, dtype) for i in range(n)]


def placed(placement) -> list[tuple[str, str | None, str | None]]:
    return [(op.op_type, op.device, op.rule) for op in placement.ops]


# ---------------------------------------------------------------------------------------------
# Whole-program rules


def test_a_float32_program_keeps_every_operation_off_the_neural_engine_even_its_integer_ones():
    """The per-op float32 rule would hide a missing program rule on float32 ops: an int32 op would still
    land on the Neural Engine. The program rule keeps all of them off, and says why."""
    ops = [layer("conv", 0, "fp32"), layer("reduce_argmax", 1, "int32"), layer("cast", 2, "int32"),
           layer("add", 3, "int32"), layer("relu", 4, "fp32")]
    placement = estimate_placement(program(ops, "FLOAT32"), "cpu_and_ne")
    assert placed(placement) == [(op.op_type, "cpu", "float32-program") for op in ops]
    assert [op.reason for op in placement.ops] == [FP32_REASON] * 5
    assert placement.by_count == {"cpu": 1.0} and placement.rules == {"float32-program": 5}
    assert placement.confidence == "high"
    assert placement.note == (f"{FLOAT32_NOTE} Rules that decided: float32-program (high). {ESTIMATE_CAVEAT}")


def test_a_float32_program_under_all_goes_to_the_gpu_and_says_why_not_the_neural_engine():
    ops = [layer("conv", 0, "fp32"), layer("reduce_argmax", 1, "int32")]
    placement = estimate_placement(program(ops, "FLOAT32"), "all")
    assert placed(placement) == [("conv", "gpu", "gpu-assumed"), ("reduce_argmax", "gpu", "gpu-assumed")]
    assert [op.reason for op in placement.ops] == [FP32_REASON, FP32_REASON]
    assert placement.note == (f"{FLOAT32_NOTE} Under ALL it runs on the GPU where supported. Rules that decided: "
                              f"gpu-assumed (low). {ESTIMATE_CAVEAT}")
    assert placement.preferred == "neural_engine" and placement.confidence == "low"


def test_cpu_only_puts_everything_on_the_cpu_without_a_note():
    placement = estimate_placement(program(convs(4) + [layer("lstm", 9)]), "cpu_only")
    assert {(op.device, op.rule, op.reason) for op in placement.ops} == {("cpu", "cpu-only", None)}
    assert placement.note is None and placement.preferred == "cpu" and placement.switches == 0
    assert placement.rules == {"cpu-only": 5} and placement.confidence == "high"


def test_cpu_and_gpu_assumes_the_gpu_for_every_operation():
    placement = estimate_placement(program(convs(5) + [layer("lstm", 9)]), "cpu_and_gpu")
    assert {(op.device, op.rule, op.reason) for op in placement.ops} == {("gpu", "gpu-assumed", None)}
    assert placement.preferred == "gpu" and placement.by_count == {"gpu": 1.0}
    assert placement.note == ("GPU support is assumed for every operation; no public list exists. Rules that decided: "
                              f"gpu-assumed (low). {ESTIMATE_CAVEAT}")


def test_a_float16_program_whose_every_operation_is_blocked_names_each_blocking_rule():
    ops = [layer("lstm", 0), layer("gru", 1), layer("scatter", 2), layer("lstm", 3), layer("topk", 4)]
    placement = estimate_placement(program(ops), "cpu_and_ne")
    assert placed(placement) == [("lstm", "cpu", "recurrent"), ("gru", "cpu", "recurrent"),
                                 ("scatter", "cpu", "scatter"), ("lstm", "cpu", "recurrent"), ("topk", "cpu", "topk")]
    assert [op.reason for op in placement.ops] == [RECURRENT, RECURRENT, "scatter falls off the Neural Engine",
                                                   RECURRENT, "topk leaves the Neural Engine"]
    assert placement.note == (
        "No operation is eligible for the Neural Engine. 5 of 5 compute operations stay off the Neural Engine: "
        f"lstm ×2 ({RECURRENT}); gru ×1 ({RECURRENT}); scatter ×1 (scatter falls off the Neural Engine); topk ×1 "
        "(topk leaves the Neural Engine). Rules that decided: recurrent (high), scatter (high), topk (low). "
        f"{ESTIMATE_CAVEAT}")
    under_all = estimate_placement(program(ops), "all")
    assert placed(under_all) == [(op.op_type, "gpu", "gpu-assumed") for op in ops]
    assert under_all.ops[0].reason == RECURRENT and under_all.ops[2].reason == "scatter falls off the Neural Engine"


def test_a_small_program_stays_on_the_cpu_at_the_rules_bounds():
    at_bound = estimate_placement(program(convs(4), flops=149_999_999), "cpu_and_ne")
    assert placed(at_bound) == [(t, "cpu", "small-program-cpu") for t in ("conv", "relu", "conv", "relu")]
    assert at_bound.ops[0].reason == "the program is too small to gain from the Neural Engine"
    assert at_bound.note == (
        "4 of 4 compute operations stay off the Neural Engine: conv ×2 (the program is too small to gain from the "
        "Neural Engine); relu ×2 (the program is too small to gain from the Neural Engine). Rules that decided: "
        f"small-program-cpu (low). {ESTIMATE_CAVEAT}")
    five_ops = estimate_placement(program(convs(5), flops=1000), "cpu_and_ne")
    assert {op.device for op in five_ops.ops} == {"neural_engine"}
    enough_work = estimate_placement(program(convs(4), flops=150_000_000), "cpu_and_ne")
    assert {op.device for op in enough_work.ops} == {"neural_engine"}
    unknown_work = estimate_placement(program(convs(4), flops=None), "cpu_and_ne")
    assert {op.device for op in unknown_work.ops} == {"neural_engine"}
    assert {op.device for op in estimate_placement(program(convs(4), flops=0), "cpu_and_gpu").ops} == {"gpu"}


def test_a_model_over_one_gigabyte_of_weights_stays_on_the_cpu():
    reason = load_rules()["model-over-1gb"].reason
    big = estimate_placement(program(convs(6), weight_bytes=1_000_000_001), "cpu_and_ne")
    assert {(op.device, op.rule, op.reason) for op in big.ops} == {("cpu", "model-over-1gb", reason)}
    at_limit = estimate_placement(program(convs(6), weight_bytes=1_000_000_000), "cpu_and_ne")
    assert {op.device for op in at_limit.ops} == {"neural_engine"}
    unknown = estimate_placement(program(convs(6), weight_bytes=None), "cpu_and_ne")
    assert {op.device for op in unknown.ops} == {"neural_engine"}


# ---------------------------------------------------------------------------------------------
# Per-operation rules and islands


def test_eligible_operations_go_to_the_neural_engine_and_blocked_ones_say_why():
    ops = [*convs(3), layer("lstm", 3), layer("lstm", 4), layer("lstm", 5), *[layer("relu", i) for i in range(6, 9)]]
    placement = estimate_placement(program(ops), "cpu_and_ne")
    assert placed(placement) == [("conv", "neural_engine", None), ("relu", "neural_engine", None),
                                 ("conv", "neural_engine", None), ("lstm", "cpu", "recurrent"),
                                 ("lstm", "cpu", "recurrent"), ("lstm", "cpu", "recurrent"),
                                 ("relu", "neural_engine", None), ("relu", "neural_engine", None),
                                 ("relu", "neural_engine", None)]
    assert placement.switches == 2 and placement.by_count == {"neural_engine": 6 / 9, "cpu": 3 / 9}
    assert placement.preferred == "neural_engine" and placement.constants == 3
    assert placement.rules == {"recurrent": 3} and placement.confidence == "high"
    assert placement.note == (f"3 of 9 compute operations stay off the Neural Engine: lstm ×3 ({RECURRENT}). "
                              f"Rules that decided: recurrent (high). {ESTIMATE_CAVEAT}")


def test_under_all_eligible_operations_name_the_cpu_fallback_rule():
    placement = estimate_placement(program(convs(6)), "all")
    assert placed(placement) == [(op.op_type, "neural_engine", "all-prefers-cpu-fallback") for op in placement.ops]
    assert placement.note == (
        "Every compute operation is eligible for the Neural Engine. On a Mac, Core ML may give much of the model to "
        "the GPU under ALL instead. Rules that decided: all-prefers-cpu-fallback (low). " + ESTIMATE_CAVEAT)


def test_a_program_the_neural_engine_takes_whole_names_no_rule():
    placement = estimate_placement(program(convs(6)), "cpu_and_ne")
    assert placed(placement) == [(op.op_type, "neural_engine", None) for op in placement.ops]
    assert placement.rules == {} and placement.confidence is None
    assert placement.note == f"Every compute operation is eligible for the Neural Engine. {ESTIMATE_CAVEAT}"
    assert (placement.source, placement.method) == ("estimated", "mlbench rules (placement_rules.yaml)")


@pytest.mark.parametrize("kinds, tail", [(6, "."), (7, "; and 1 more kinds.")])
def test_the_off_engine_summary_counts_kinds_past_six(kinds, tail):
    blocked = ["lstm", "gru", "rnn", "scatter", "scatter_nd", "topk", "band_part"][:kinds]
    ops = [layer(t, i) for i, t in enumerate(blocked)] + convs(4)
    note = estimate_placement(program(ops), "cpu_and_ne").note
    summary = note.split("compute operations stay off the Neural Engine: ")[1].split(" Rules that decided")[0]
    assert summary.count("×1") == 6 and summary.endswith(f"(topk leaves the Neural Engine){tail}")


def test_an_unknown_precision_places_by_operation_type_and_says_so():
    placement = estimate_placement(program([*convs(5), layer("lstm", 5)], "UNKNOWN"), "cpu_and_ne")
    assert placement.note == (
        "The package does not say its precision, so placement follows operation types only. 1 of 6 compute "
        f"operations stay off the Neural Engine: lstm ×1 ({RECURRENT}). Rules that decided: recurrent (high). "
        + ESTIMATE_CAVEAT)


def test_the_first_matching_rule_in_file_order_blocks_an_operation():
    rules = load_rules()
    context = ProgramContext.of(program(convs(6)))
    assert ane_blocker(layer("lstm", dtype="fp32"), rules, context).id == "recurrent"  # before float32-op
    assert ane_blocker(layer("relu", dtype="fp32"), rules, context).id == "float32-op"
    assert ane_blocker(layer("relu", dtype="fp16"), rules, context) is None
    assert ane_blocker(layer("linear", shape=[1, 16385]), rules, context).id == "dim-over-16384"
    assert ane_blocker(layer("linear", shape=[1, 16384]), rules, context) is None
    assert ane_blocker(layer("gather", table_rows=40000, runtime_indices=True), rules, context).id == \
        "embedding-table-over-32768"


@pytest.mark.parametrize("devices, expected", [
    # a run of at most 2 eligible ops between CPU ops moves to the CPU
    (["cpu", "ne", "cpu"], ["cpu", "cpu", "cpu"]),
    (["cpu", "ne", "ne", "cpu"], ["cpu", "cpu", "cpu", "cpu"]),
    (["cpu", "ne", "ne", "ne", "cpu"], ["cpu", "ne", "ne", "ne", "cpu"]),   # 3 is not short
    (["ne", "ne", "cpu", "ne"], ["ne", "ne", "cpu", "ne"]),                 # at an end: one side only
    (["ne", "cpu", "ne", "ne", "cpu", "ne", "cpu"], ["ne", "cpu", "cpu", "cpu", "cpu", "cpu", "cpu"]),
])
def test_short_neural_engine_islands_between_cpu_operations_move_to_the_cpu(devices, expected):
    ops = [layer("lstm", i) if d == "cpu" else layer("relu", i) for i, d in enumerate(devices)]
    placement = estimate_placement(program(ops), "cpu_and_ne")
    assert [op.device for op in placement.ops] == [{"ne": "neural_engine"}.get(d, d) for d in expected]
    moved = [op for op, before in zip(placement.ops, devices) if before == "ne" and op.device == "cpu"]
    assert all(op.rule == "small-island" and op.reason == load_rules()["small-island"].reason for op in moved)


def test_the_off_engine_summary_shows_six_kinds_and_counts_the_rest():
    blocked = ["lstm", "gru", "rnn", "scatter", "scatter_nd", "topk", "band_part", "resample"]
    ops = [layer(t, i) for i, t in enumerate(blocked)] + [layer("lstm", 20)] + convs(4)
    note = estimate_placement(program(ops), "cpu_and_ne").note
    assert note.startswith(f"9 of 13 compute operations stay off the Neural Engine: lstm ×2 ({RECURRENT}); gru ×1 "
                           f"({RECURRENT}); rnn ×1 ({RECURRENT}); scatter ×1 (scatter falls off the Neural Engine); "
                           "scatter_nd ×1 (scatter falls off the Neural Engine); topk ×1 (topk leaves the Neural "
                           "Engine); and 2 more kinds. Rules that decided: ")


def test_costs_are_shares_of_the_roofline_time_on_each_device():
    ops = [layer("conv", 0), layer("lstm", 1), layer("relu", 2)]
    ops[0].flops, ops[1].flops, ops[2].bytes = 10**9, 10**8, 10**6
    placement = estimate_placement(program(ops), "cpu_and_ne")
    assert placement.cost_basis == "roofline" and sum(op.cost for op in placement.ops) == pytest.approx(1.0)
    assert set(placement.by_cost) == {"neural_engine", "cpu"} and all(op.cost > 0 for op in placement.ops)
    no_cost = estimate_placement(program(convs(6)), "cpu_and_ne")
    assert no_cost.cost_basis is None and no_cost.by_cost is None and {op.cost for op in no_cost.ops} == {None}


def test_constants_count_weight_ops_too():
    placement = estimate_placement(program(convs(6), const_count=4, weight_ops={"constexpr_lut_to_dense": 2}), "all")
    assert placement.constants == 6 and placement.compute_ops == 6 and placement.unknown == 0


# ---------------------------------------------------------------------------------------------
# The pieces


@pytest.mark.parametrize("name, expected", [
    ("ios17.conv", "conv"), ("iOS18.constexpr_lut_to_dense", "constexpr_lut_to_dense"), ("macOS14.relu", "relu"),
    ("watchos10.add", "add"), ("tvOS17.mul", "mul"), ("CoreML7.linear", "linear"), ("ios17.a.b", "a.b"),
    ("conv", "conv"), ("my.custom", "my.custom"), ("ios17", "ios17"),
])
def test_opset_prefixes_are_normalised(name, expected):
    assert normalise_op_type(name) == expected


def test_data_operations_are_constants_and_lookups_are_not():
    assert [is_data_op(t) for t in ("const", "constexpr_lut_to_dense", "constexpr_affine_dequantize", "constant",
                                    "conv", "gather")] == [True, True, True, False, False, False]


def test_switches_count_device_changes_between_known_devices():
    assert count_switches(["neural_engine", None, "neural_engine", "cpu", "cpu", "gpu"]) == 2
    assert count_switches([None, None]) == 0 and count_switches([]) == 0 and count_switches(["cpu", "gpu", "cpu"]) == 2


def test_fractions_list_known_devices_first_and_weigh_by_cost():
    ops = [OpPlacement(name=str(i), op_type="x", device=d, cost=c) for i, (d, c) in enumerate(
        [("dsp", 0.5), ("cpu", 0.1), ("neural_engine", None), ("neural_engine", 0.4), (None, 0.2)])]
    assert list(fractions(ops).items()) == [("neural_engine", 0.5), ("cpu", 0.25), ("dsp", 0.25)]
    assert fractions(ops, weight=lambda op: op.cost) == pytest.approx({"neural_engine": 0.4, "cpu": 0.1, "dsp": 0.5})
    assert fractions([OpPlacement(name="a", op_type="x", device=None)]) == {}
    assert fractions(ops[2:3], weight=lambda op: op.cost) == {}


def test_summarise_keeps_cost_shares_only_with_a_cost_basis():
    ops = [OpPlacement(name="a", op_type="x", device="cpu", cost=0.25),
           OpPlacement(name="b", op_type="x", device=None, cost=0.75)]
    weighed = summarise([*ops, OpPlacement(name="c", op_type="x", device="gpu", cost=0.75)], source="measured",
                        method="m", preferred="cpu", constants=0, note=None, cost_basis="estimated_cost")
    assert weighed.by_cost == {"gpu": 0.75, "cpu": 0.25} and weighed.by_count == {"gpu": 0.5, "cpu": 0.5}
    with_cost = summarise(ops, source="measured", method="m", preferred="cpu", constants=2, note=None,
                          cost_basis="estimated_cost")
    assert (with_cost.by_cost, with_cost.cost_basis, with_cost.unknown, with_cost.compute_ops) == (
        {"cpu": 1.0}, "estimated_cost", 1, 2)
    without = summarise(ops, source="measured", method="m", preferred="cpu", constants=2, note="n", cost_basis=None)
    assert (without.by_cost, without.cost_basis, without.note, without.constants) == (None, None, "n", 2)
    unknown_only = summarise(ops[1:], source="measured", method="m", preferred=None, constants=0, note=None,
                             cost_basis="estimated_cost")
    assert (unknown_only.by_cost, unknown_only.cost_basis) == (None, None)


# ---------------------------------------------------------------------------------------------
# The rule file: OS levels, bounds, program conditions, confidence and the `mlbench rules` table


@pytest.mark.parametrize("name, level", [
    ("iOS17", 17.0), ("iOS17.4", 17.4), ("iOS16.0", 16.0), ("macOS12", 15.0), ("macOS13", 16.0), ("macOS14", 17.0),
    ("macOS15", 18.0), ("macOS26", 26.0), ("macOS11", 11.0), ("watchOS10", 10.0), ("tvOS17.2", 17.2),
    ("visionOS2", 2.0), ("iOS", None), ("ios17", None), ("iOS17.4.1", None), ("", None), (None, None),
])
def test_os_levels(name, level):
    assert os_level(name) == (pytest.approx(level) if level is not None else None)


def context(os: float | None = None, ops: int = 10, flops: int | None = 10**9, flexible: bool = False):
    return ProgramContext(compute_ops=ops, flops=flops, flexible_input=flexible, os_level=os)


def test_os_bounds_are_inclusive_and_open_when_the_target_is_unknown():
    rule = Rule(id="r", kind="op", reason="x", source="s", confidence="low", os_min=16.0, os_max=17.0)
    assert [rule.in_os_bounds(context(level)) for level in (15.9, 16.0, 17.0, 17.1, None)] == [
        False, True, True, False, True]
    lower_only = Rule(id="r", kind="op", reason="x", source="s", confidence="low", os_min=16.0)
    upper_only = Rule(id="r", kind="op", reason="x", source="s", confidence="low", os_max=16.0)
    assert [lower_only.in_os_bounds(context(v)) for v in (15.0, 26.0)] == [False, True]
    assert [upper_only.in_os_bounds(context(v)) for v in (15.0, 16.4)] == [True, False]


def test_a_rule_matches_its_ops_its_conditions_and_its_os_range():
    flexible_norm = load_rules()["flexible-layer-norm"]
    norm = layer("layer_norm", shape=[1, 8, 16])
    assert flexible_norm.matches(norm, context(16.0, flexible=True))
    assert not flexible_norm.matches(norm, context(17.0, flexible=True))               # outside its OS range
    assert not flexible_norm.matches(norm, context(16.0, flexible=False))              # a condition fails
    assert not flexible_norm.matches(layer("layer_norm", shape=[1, 16]), context(16.0, flexible=True))  # rank 2
    assert not flexible_norm.matches(layer("linear", shape=[1, 8, 16]), context(16.0, flexible=True))    # other op


def test_the_program_context_reads_the_analysis():
    analysis = program(convs(3), flops=123, flexible=True, opset_os="iOS17", min_os="iOS15")
    assert ProgramContext.of(analysis) == ProgramContext(compute_ops=3, flops=123, flexible_input=True, os_level=17.0)
    assert ProgramContext.of(program(convs(2), min_os="macOS13")).os_level == 16.0
    assert ProgramContext.of(program(convs(2))) == ProgramContext(compute_ops=2, flops=10**9, flexible_input=False,
                                                                  os_level=None)


def test_the_small_program_rule_holds_only_for_few_ops_and_little_known_work():
    small = load_rules()["small-program-cpu"]
    assert small.holds_for_program(context(ops=4, flops=149_999_999))
    assert not small.holds_for_program(context(ops=5, flops=1))
    assert not small.holds_for_program(context(ops=4, flops=150_000_000))
    assert not small.holds_for_program(context(ops=4, flops=None))


def test_the_lowest_confidence_of_the_rules_that_decided():
    assert lowest_confidence({"cpu-only", "small-program-cpu"}) == "low"
    assert lowest_confidence({"cpu-only", "control-flow"}) == "medium"
    assert lowest_confidence({"cpu-only", "no-such-rule"}) == "high"
    assert lowest_confidence(set()) is None and lowest_confidence({"no-such-rule"}) is None


def test_the_rules_table_says_what_each_rule_applies_to():
    rows = {row["id"]: row for row in rule_table()}
    assert list(rows) == list(load_rules())
    assert rows["float32-program"] == {"id": "float32-program", "kind": "program", "applies_to": "program",
                                       "confidence": "high", "says": FP32_REASON,
                                       "source": load_rules()["float32-program"].source}
    assert rows["float32-op"]["applies_to"] == "every operation when float32_output=True"
    assert rows["recurrent"]["applies_to"] == "biDirectionalLSTM, gru, lstm, rnn, simpleRecurrent, uniDirectionalLSTM"
    assert rows["small-program-cpu"]["applies_to"] == "program when program_ops_at_most=4, program_flops_below=150000000"
    assert rows["small-island"]["applies_to"] == "program"
    assert rows["flexible-layer-norm"]["applies_to"] == "layer_norm when flexible_input=True, rank=3 (max iOS16)"
    assert "\n" not in rows["all-prefers-cpu-fallback"]["says"] and "  " not in rows["all-prefers-cpu-fallback"]["says"]
