"""The published placement observations hold together: every entry has what the script needs, and every
`model` names a builder in benchmarks/placement_sources.py. Fast: nothing is built or exported here."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import yaml

from tests.conftest import ROOT

BENCH = ROOT / "benchmarks"
CLAUSE_KEYS = {"op_type", "output_dtype", "output_shape", "device", "not_device", "all_ops", "none_on", "majority", "min_share", "uses"}
DEVICES = {"neural_engine", "gpu", "cpu"}


def load_script():
    name = "bench_placement_sources"
    spec = importlib.util.spec_from_file_location(name, BENCH / "placement_sources.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


@pytest.fixture(scope="module")
def observations() -> list[dict]:
    return yaml.safe_load((BENCH / "placement_observations.yaml").read_text(encoding="utf-8"))["observations"]


def test_entries_have_what_the_script_needs(observations):
    assert len(observations) >= 14
    ids = [entry["id"] for entry in observations]
    assert len(ids) == len(set(ids)), "ids must be unique"
    for entry in observations:
        for key in ("id", "observation", "source", "expect", "model", "compute_units", "rule"):
            assert entry.get(key), f"{entry.get('id')}: no {key}"
        assert entry["source"].startswith("https://"), entry["id"]
        assert entry["compute_units"] in {"cpu_only", "cpu_and_gpu", "cpu_and_ne", "all"}, entry["id"]
        assert entry.get("precision", "float16") in {"float16", "float32"}, entry["id"]
        assert entry.get("weight", "normal") in {"normal", "low"}, entry["id"]
        clauses = entry["expect"] if isinstance(entry["expect"], list) else [entry["expect"]]
        for clause in clauses:
            assert set(clause) <= CLAUSE_KEYS, f"{entry['id']}: unknown keys {set(clause) - CLAUSE_KEYS}"
            if {"op_type", "output_dtype", "output_shape"} & set(clause):
                assert ("device" in clause) != ("not_device" in clause), entry["id"]
            for key in ("device", "not_device", "all_ops", "none_on", "majority", "uses"):
                if key in clause:
                    assert clause[key] in DEVICES, entry["id"]
            for device, share in clause.get("min_share", {}).items():
                assert device in DEVICES and 0 < share <= 1, entry["id"]


def test_every_model_names_a_builder(observations):
    script = load_script()
    for entry in observations:
        assert entry["model"] in script.BUILDERS, f"{entry['id']}: no builder {entry['model']!r}"
    # the script can describe every expectation it will check
    for entry in observations:
        clauses = entry["expect"] if isinstance(entry["expect"], list) else [entry["expect"]]
        assert script.expected_text(clauses)
