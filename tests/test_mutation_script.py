"""benchmarks/mutation.py stays runnable and its config stays true: every module, file and test it names
exists, equivalent mutants carry reasons, and survivors are judged against the config. Fast: mutmut is
not run here (a run takes minutes per module: examples/ci/mutation.yml runs it weekly)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def bench():
    name = "bench_mutation"
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def test_the_config_names_the_silent_modules_and_existing_fast_tests(bench):
    settings, modules = bench.load_config()
    assert settings.max_children == 1
    assert modules["compare"].tests[:2] == ["tests/compare/test_comparison.py", "tests/compare/test_gate.py"]
    assert list(modules) == ["compare", "cache", "journal", "placement", "verify", "matrix"]
    assert [p for m in modules.values() for p in m.paths] == [
        "mlbench/compare/comparison.py", "mlbench/compare/rules.py", "mlbench/compare/noise.py",
        "mlbench/store/cache.py", "mlbench/store/entry.py", "mlbench/store/hashing.py", "mlbench/store/marker.py",
        "mlbench/store/audit.py", "mlbench/run/journal.py", "mlbench/backends/apple/placement.py",
        "mlbench/backends/apple/placement_rules.py", "mlbench/verify.py", "mlbench/matrix.py"]
    for module in modules.values():
        assert all((ROOT / test.split("::")[0]).is_file() for test in module.tests), module.name
        for entry in module.equivalent:
            assert entry.reason.strip() and "\n" not in entry.reason, entry
            assert entry.kind in ("equivalent", "untestable"), entry
            assert entry.function.startswith(".".join(module.paths[0].split("/")[:-1])), entry
    assert all((ROOT / name).is_dir() for name in settings.also_copy)


def test_each_module_gets_its_own_mutmut_table(bench):
    settings, modules = bench.load_config()
    tomllib = bench.tomllib  # the standard library's, or tomli on Python 3.10
    table = tomllib.loads(bench.mutmut_table(modules["compare"], settings, modules["compare"].tests))["tool"]["mutmut"]
    assert table == {
        "source_paths": ["mlbench"],
        "only_mutate": ["mlbench/compare/comparison.py", "mlbench/compare/rules.py", "mlbench/compare/noise.py"],
        "pytest_add_cli_args_test_selection": modules["compare"].tests,
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-m", "not torch"],
        "also_copy": ["examples", "pipelines", "schemas"],
        "timeout_multiplier": settings.timeout_multiplier,
        "timeout_constant": settings.timeout_constant,
        "use_git_change_detection": False,
    }
    text = "[project]\nname = 'x'\n\n[tool.mutmut]\nold = 1\n\n[tool.pytest.ini_options]\naddopts = '-q'\n"
    assert tomllib.loads(bench.without_mutmut_tables(text)) == {"project": {"name": "x"},
                                                                "tool": {"pytest": {"ini_options": {"addopts": "-q"}}}}


DIFF = """--- mlbench/run/journal.py
+++ mlbench/run/journal.py
@@ -1,3 +1,3 @@
 def resumed(self, info):
-    self._append({"resumed": info})
+    self._append({"XXresumedXX": info})"""


def test_survivors_are_equivalent_only_when_the_config_explains_that_very_change(bench):
    equivalent = bench.Equivalent(function="mlbench.run.journal.xǁJournalǁresumed",
                                  change='self._append({"XXresumedXX": info})', reason="a marker nobody reads")
    stale = bench.Equivalent(function="mlbench.run.journal.xǁJournalǁload", change="pass", reason="gone")
    module = bench.Module(name="journal", paths=["mlbench/run/journal.py"], tests=[], equivalent=[equivalent, stale])
    found = {"mlbench.run.journal.xǁJournalǁresumed__mutmut_1": "survived",
             "mlbench.run.journal.xǁJournalǁresumed__mutmut_2": "survived",
             "mlbench.run.journal.xǁJournalǁstart__mutmut_1": "killed",
             "mlbench.run.journal.xǁJournalǁstart__mutmut_2": "timeout",
             "mlbench.run.journal.xǁJournalǁload__mutmut_9": "no tests"}
    diffs = {"mlbench.run.journal.xǁJournalǁresumed__mutmut_1": DIFF,
             "mlbench.run.journal.xǁJournalǁresumed__mutmut_2": DIFF.replace("XXresumedXX", "RESUMED"),
             "mlbench.run.journal.xǁJournalǁload__mutmut_9": ""}
    outcome = bench.judge(module, found, diffs, seconds=12.0)
    assert outcome.equivalent == {"mlbench.run.journal.xǁJournalǁresumed__mutmut_1": equivalent}
    assert sorted(outcome.survivors) == ["mlbench.run.journal.xǁJournalǁload__mutmut_9",
                                         "mlbench.run.journal.xǁJournalǁresumed__mutmut_2"]
    assert outcome.stale == [stale]
    assert (outcome.planted, outcome.detected, outcome.score) == (5, 2, 0.5)
    text = bench.report(outcome)
    assert text.splitlines()[:2] == [
        "## journal: mutation score 50.0% (2 killed of 5 planted, 1 equivalent, 2 surviving; 12 s)",
        "   killed 1, no tests 1, survived 2, timeout 1"]
    assert "surviving (survived): mlbench.run.journal.xǁJournalǁresumed__mutmut_2\n" + DIFF.replace(
        "XXresumedXX", "RESUMED") in text
    assert ("  equivalent: mlbench.run.journal.xǁJournalǁresumed__mutmut_1: self._append({\"XXresumedXX\": info})  -- "
            "a marker nobody reads") in text
    assert text.endswith("stale equivalent entry (no such surviving mutant now): mlbench.run.journal.xǁJournalǁload: pass")
    untestable = bench.Equivalent(function=equivalent.function, change=equivalent.change, reason="Windows only",
                                  kind="untestable")
    outcome = bench.judge(bench.Module(name="journal", paths=[], tests=[], equivalent=[untestable]), found, diffs, 1.0)
    assert (outcome.equivalents, outcome.score) == (0, 0.4)  # untestable mutants count against the score
    assert bench.report(outcome).splitlines()[0] == (
        "## journal: mutation score 40.0% (2 killed of 5 planted, 0 equivalent, 1 untestable here, 2 surviving; 1 s)")


def test_an_unknown_module_is_refused(bench, capsys):
    with pytest.raises(SystemExit) as info:
        bench.main(["--module", "nope"])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "error: unknown module 'nope' (known: compare, cache, journal, placement, verify, matrix, all)")
    assert bench.main(["--list", "--module", "journal"]) == 0
    assert capsys.readouterr().out == "journal: mlbench/run/journal.py\n  tests: tests/run/test_journal.py\n"
