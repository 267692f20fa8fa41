"""Placement v2.1 on hand-built program analyses: operations on an integer path (a bool mask, a comparison,
index arithmetic, a cast or gather of such data) follow their neighbour; 16-bit and wider integers stay
off the Neural Engine; only an operation that computes opens the Neural Engine; islands look past
integer paths. Fast: nothing is exported (tests/backends/apple/test_placement_transformers.py does it on real models)."""

from __future__ import annotations

from mlbench.backends.apple.analysis import LayerInfo
from mlbench.backends.apple.placement import estimate_placement
from mlbench.backends.apple.placement_rules import load_rules, rule_table
from tests.backends.apple.test_placement_logic import placed, program

NE, CPU, GPU = "neural_engine", "cpu", "gpu"
FOLLOW = "integer-follows-neighbour"
FOLLOW_REASON = ("an operation on an integer path (a bool mask, a comparison, a cast or gather of such data) runs "
                 "where the operation it feeds runs")


def op(op_type: str, i: int, dtype: str = "fp16", inputs: tuple[int, ...] = (), integer: bool = False,
       **attributes) -> LayerInfo:
    return LayerInfo(name=f"{op_type}_{i}", op_type=op_type, output_dtype=dtype, output_shape=[1, 64, 32, 32],
                     inputs=list(inputs), integer_data=integer, attributes=attributes)


def mixed_paths() -> list[LayerInfo]:
    """Float work with a mask feeding the Neural Engine, a mask feeding a CPU gather, int32 positions,
    a comparison of the result, and a lone comparison of an input."""
    return [
        op("conv", 0), op("relu", 1, inputs=(0,)),
        op("equal", 2, "bool", integer=True), op("cast", 3, inputs=(2,), integer=True),  # a mask cast to float16
        op("mul", 4, inputs=(1, 3)),
        op("logical_and", 5, "bool", integer=True),
        op("gather_nd", 6, inputs=(5,), runtime_indices=True),  # a lookup the rules put on the CPU
        op("cumsum", 7, "int32", integer=True), op("cast", 8, inputs=(7,), integer=True),  # int32 positions
        op("add", 9, inputs=(4, 8)),
        op("greater", 10, "bool", inputs=(9,), integer=True),  # feeds nothing: follows what feeds it
        op("not_equal", 11, "bool", integer=True),  # no neighbour at all
    ]


def test_integer_paths_in_a_float16_program_follow_the_op_they_feed():
    placement = estimate_placement(program(mixed_paths()), "cpu_and_ne")
    assert placed(placement) == [
        ("conv", NE, None), ("relu", NE, None),
        ("equal", NE, FOLLOW), ("cast", NE, FOLLOW),  # the mask goes where the mul it feeds goes
        ("mul", NE, None),
        ("logical_and", CPU, FOLLOW), ("gather_nd", CPU, "gather-runtime-indices"),  # ... and here to the CPU
        ("cumsum", CPU, "wide-integer"), ("cast", NE, FOLLOW),  # int32 is no Neural Engine type; its cast follows
        ("add", NE, None),
        ("greater", NE, FOLLOW),
        ("not_equal", CPU, FOLLOW),
    ]
    reasons = {o.name: o.reason for o in placement.ops}
    assert reasons["logical_and_5"] == reasons["not_equal_11"] == FOLLOW_REASON and reasons["equal_2"] is None
    assert reasons["cumsum_7"] == ("a 16-, 32- or 64-bit integer (an int32 cumsum, index arithmetic, an int32 input "
                                   "read) is not a Neural Engine data type")
    assert placement.rules == {FOLLOW: 6, "gather-runtime-indices": 1, "wide-integer": 1}
    assert placement.confidence == "low"


def test_an_op_reading_an_int32_input_stays_off_the_neural_engine():
    layers = mixed_paths()
    layers[2] = op("equal", 2, "bool", integer=True, wide_integer_input=True)  # e.g. input_ids != 0
    assert placed(estimate_placement(program(layers), "cpu_and_ne"))[2:4] == [
        ("equal", CPU, "wide-integer"), ("cast", NE, FOLLOW)]


def test_a_float32_program_keeps_its_integer_paths_off_the_neural_engine():
    assert {(o.device, o.rule) for o in estimate_placement(program(mixed_paths(), "FLOAT32"), "cpu_and_ne").ops} == {
        (CPU, "float32-program")}
    assert {(o.device, o.rule) for o in estimate_placement(program(mixed_paths(), "FLOAT32"), "all").ops} == {
        (GPU, "gpu-assumed")}


def test_integer_paths_that_stay_with_their_neighbour_move_nothing():
    layers = mixed_paths()[:5]  # conv, relu, the mask and the mul it feeds
    placement = estimate_placement(program(layers), "cpu_and_ne")
    assert {o.device for o in placement.ops} == {NE} and placement.rules == {FOLLOW: 2}
    assert placement.confidence is None  # nothing left the preferred device


def test_only_an_operation_that_computes_opens_the_neural_engine():
    layers = [op("equal", 0, "bool", integer=True), op("cast", 1, inputs=(0,), integer=True),
              op("gather_nd", 2, inputs=(1,), runtime_indices=True), op("lstm", 3, inputs=(2,)),
              op("logical_not", 4, "bool", inputs=(3,), integer=True), op("cast", 5, inputs=(4,), integer=True)]
    placement = estimate_placement(program(layers), "cpu_and_ne")
    assert placed(placement) == [("equal", CPU, FOLLOW), ("cast", CPU, FOLLOW),
                                 ("gather_nd", CPU, "gather-runtime-indices"), ("lstm", CPU, "recurrent"),
                                 ("logical_not", CPU, FOLLOW), ("cast", CPU, FOLLOW)]
    assert "No operation is eligible for the Neural Engine." in placement.note
    assert [o.reason for o in placement.ops if o.rule == FOLLOW] == [FOLLOW_REASON] * 4
    under_all = estimate_placement(program(layers), "all")  # nothing computes on the Neural Engine: the GPU
    assert {(o.device, o.rule) for o in under_all.ops} == {(GPU, "gpu-assumed")}
    assert [o.reason for o in under_all.ops] == [FOLLOW_REASON, FOLLOW_REASON, load_rules()["gather-runtime-indices"].reason,
                                                 load_rules()["recurrent"].reason, FOLLOW_REASON, FOLLOW_REASON]


def test_islands_look_past_integer_paths():
    layers = [op("lstm", 0), op("conv", 1, inputs=(0,)), op("equal", 2, "bool", integer=True),
              op("relu", 3, inputs=(1, 2)), op("lstm", 4, inputs=(3,))]
    assert placed(estimate_placement(program(layers), "cpu_and_ne")) == [
        ("lstm", CPU, "recurrent"), ("conv", CPU, "small-island"), ("equal", CPU, FOLLOW),
        ("relu", CPU, "small-island"), ("lstm", CPU, "recurrent")]


def test_the_new_rules_name_their_source_and_confidence():
    rules = load_rules()
    assert (rules["wide-integer"].kind, rules["wide-integer"].confidence) == ("op", "low")
    assert rules["wide-integer"].source.startswith("tinygrad extra/accel/ane/README.md")
    assert (rules[FOLLOW].kind, rules[FOLLOW].confidence, rules[FOLLOW].reason) == ("neighbour", "low", FOLLOW_REASON)
    assert rules[FOLLOW].source.startswith("mlbench assumption")
    rows = {row["id"]: row for row in rule_table()}
    assert rows[FOLLOW]["applies_to"] == "operations on an integer path"
    assert rows["wide-integer"]["applies_to"] == "every operation when wide_integer_data=True"
