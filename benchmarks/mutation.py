"""Mutation testing of the modules whose mistakes a user would not notice (mutmut 3).

A bug in the compare gate, the cache key, the journal, Core ML placement, output verification or the
matrix does not crash anything: it changes an exit code, a figure or a decision. This script plants
such bugs one at a time (mutmut's mutants: `>` for `>=`, `and` for `or`, a dropped call, ...) and
runs the fast tests that cover the module against each; a mutant no test notices "survives".

Usage:
  python benchmarks/mutation.py --module compare     # one module (see benchmarks/mutation.toml)
  python benchmarks/mutation.py                      # every module, one after the other
  python benchmarks/mutation.py --list               # the modules, their files and test files

Prints, per module, the mutants planted, killed, surviving and known to be equivalent, the mutation
score (killed / (planted - equivalent)), and every surviving mutant as a diff with its name (show or
apply one with `mutmut show NAME` / `mutmut apply NAME` in .mutation/<module>/). Equivalent mutants
(the code behaves the same with the change) and untestable ones (a change this suite cannot arrange,
such as Windows-only paths; they still count against the score) are listed in benchmarks/mutation.toml
with a reason each.
Exits 1 when a mutant survives that the config does not explain.

Each module runs in its own folder, .mutation/<module>/, where mutmut copies the code to mutants/ and
keeps its state; `--keep` reuses it (only new or changed mutants are run again), otherwise it starts
over. One mutant at a time (`max_children` in the config): the suite shares small machines. Slow:
minutes per module, so it is a periodic job (examples/ci/mutation.yml), not part of .ci/run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
CONFIG = Path(__file__).with_name("mutation.toml")
WORK = ROOT / ".mutation"
DETECTED = ("killed", "timeout", "segfault", "caught by type check")


@dataclass(frozen=True)
class Equivalent:
    """A surviving mutant the config explains: `equivalent` (no input can tell it from the code) or
    `untestable` (it changes behaviour this suite cannot arrange, e.g. on Windows only)."""

    function: str  # mutmut's name for the function, without `__mutmut_N`
    change: str    # the mutated line(s), stripped, joined with " / "
    reason: str
    kind: str = "equivalent"


@dataclass
class Module:
    name: str
    paths: list[str]
    tests: list[str]
    markers: str = ""
    equivalent: list[Equivalent] = field(default_factory=list)


@dataclass
class Settings:
    max_children: int = 1
    timeout_multiplier: float = 3.0
    timeout_constant: float = 5.0
    also_copy: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    module: str
    statuses: dict[str, str]               # mutant name → mutmut's status
    survivors: dict[str, str]              # unexplained surviving mutant → its diff
    equivalent: dict[str, Equivalent]      # surviving mutant → the config entry that explains it
    stale: list[Equivalent]                # config entries that matched no surviving mutant
    seconds: float

    @property
    def planted(self) -> int:
        return len(self.statuses)

    @property
    def detected(self) -> int:
        return sum(status in DETECTED for status in self.statuses.values())

    @property
    def equivalents(self) -> int:
        return sum(e.kind == "equivalent" for e in self.equivalent.values())

    @property
    def score(self) -> float | None:
        """Killed / (planted - equivalent): an untestable mutant counts against the score."""
        judged = self.planted - self.equivalents
        return self.detected / judged if judged else None


def load_config(path: Path = CONFIG) -> tuple[Settings, dict[str, Module]]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    settings = Settings(**data.get("settings", {}))
    modules = {}
    for name, entry in data["modules"].items():
        equivalent = [Equivalent(**e) for e in entry.get("equivalent", [])]
        modules[name] = Module(name=name, paths=entry["paths"], tests=entry["tests"],
                               markers=entry.get("markers", ""), equivalent=equivalent)
    return settings, modules


def mutmut_table(module: Module, settings: Settings, tests: list[str]) -> str:
    """The [tool.mutmut] table for one module (TOML arrays of plain strings read as JSON)."""
    pytest_args = ["-p", "no:cacheprovider", *(["-m", module.markers] if module.markers else [])]
    lines = [
        "[tool.mutmut]",
        'source_paths = ["mlbench"]',
        f"only_mutate = {json.dumps(module.paths)}",
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}",
        f"pytest_add_cli_args = {json.dumps(pytest_args)}",
        f"also_copy = {json.dumps(settings.also_copy)}",
        f"timeout_multiplier = {settings.timeout_multiplier}",
        f"timeout_constant = {settings.timeout_constant}",
        "use_git_change_detection = false",
    ]
    return "\n".join(lines) + "\n"


def without_mutmut_tables(pyproject: str) -> str:
    """The project's pyproject.toml minus any [tool.mutmut] table (pytest's markers stay)."""
    out, skipping = [], False
    for line in pyproject.splitlines():
        if line.startswith("["):
            skipping = line.strip().startswith("[tool.mutmut")
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def prepare(module: Module, settings: Settings, tests: list[str], keep: bool) -> Path:
    """.mutation/<module>/: links to the code and tests, and a pyproject.toml with this module's table."""
    work = WORK / module.name
    if not keep and work.exists():
        shutil.rmtree(work)
    # mutants/ must exist before mutmut starts: Python caches a missing sys.path entry as "no importer",
    # and the tests would then import the unmutated package.
    (work / "mutants").mkdir(parents=True, exist_ok=True)
    for name in ("mlbench", "tests", *settings.also_copy):
        link = work / name
        if not link.exists():
            link.symlink_to(ROOT / name, target_is_directory=True)
    pyproject = without_mutmut_tables((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (work / "pyproject.toml").write_text(pyproject + "\n" + mutmut_table(module, settings, tests), encoding="utf-8")
    return work


def mutmut_command() -> list[str]:
    script = Path(sys.executable).with_name("mutmut")
    found = str(script) if script.exists() else shutil.which("mutmut")
    if found is None:
        raise SystemExit("mutmut is not installed: pip install 'mutmut>=3,<4'")
    return [found]


def child_env(work: Path) -> dict[str, str]:
    # Subprocesses the tests start import the mutated copy too; one thread per library: one core per mutant.
    return {**os.environ, "PYTHONPATH": str(work / "mutants"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "CI": "1"}


def statuses(work: Path) -> dict[str, str]:
    out = subprocess.run([*mutmut_command(), "results", "--all", "true"], cwd=work, env=child_env(work),
                         capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and "__mutmut_" in name:
            found[name] = status
    return found


DIFFS = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
print(json.dumps({name: get_diff_for_mutant(name) for name in json.load(sys.stdin)}))
"""


def diffs_of(work: Path, names: list[str]) -> dict[str, str]:
    """Each mutant's diff: in one process through mutmut's own function, else one `mutmut show` per mutant."""
    if not names:
        return {}
    done = subprocess.run([sys.executable, "-c", DIFFS], cwd=work, env=child_env(work), input=json.dumps(names),
                          capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return json.loads(done.stdout)
    diffs = {}
    for name in names:
        out = subprocess.run([*mutmut_command(), "show", name], cwd=work, env=child_env(work), capture_output=True,
                             text=True, check=True).stdout
        diffs[name] = "\n".join(line for line in out.splitlines() if not line.startswith("# "))
    return diffs


def mutated_lines(diff: str) -> str:
    """What the mutant changed, as the config names it: its '+' lines, stripped, joined with ' / '."""
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return " / ".join(added)


def function_of(mutant: str) -> str:
    return mutant.rsplit("__mutmut_", 1)[0]


def judge(module: Module, found: dict[str, str], diffs: dict[str, str], seconds: float) -> Outcome:
    survivors, equivalent = {}, {}
    by_key = {(e.function, e.change): e for e in module.equivalent}
    for name, status in found.items():
        if status in DETECTED:
            continue
        entry = by_key.get((function_of(name), mutated_lines(diffs.get(name, ""))))
        if entry is not None and status == "survived":
            equivalent[name] = entry
        else:
            survivors[name] = diffs.get(name, "")
    used = set(equivalent.values())
    stale = [e for e in module.equivalent if e not in used]
    return Outcome(module.name, found, survivors, equivalent, stale, seconds)


def run_module(module: Module, settings: Settings, tests: list[str], keep: bool, max_children: int) -> Outcome:
    work = prepare(module, settings, tests, keep)
    started = time.perf_counter()
    result = subprocess.run([*mutmut_command(), "run", "--max-children", str(max_children)], cwd=work,
                            env=child_env(work), capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    found = statuses(work)
    if result.returncode != 0 or not found:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise SystemExit(f"mutmut failed on module {module.name} (exit {result.returncode}):\n{tail}")
    diffs = diffs_of(work, [name for name, status in found.items() if status not in DETECTED])
    return judge(module, found, diffs, seconds)


def report(outcome: Outcome) -> str:
    counts: dict[str, int] = {}
    for status in outcome.statuses.values():
        counts[status] = counts.get(status, 0) + 1
    score = f"{100 * outcome.score:.1f}%" if outcome.score is not None else "n/a"
    untestable = len(outcome.equivalent) - outcome.equivalents
    lines = [f"## {outcome.module}: mutation score {score} "
             f"({outcome.detected} killed of {outcome.planted} planted, {outcome.equivalents} equivalent, "
             + (f"{untestable} untestable here, " if untestable else "")
             + f"{len(outcome.survivors)} surviving; {outcome.seconds:.0f} s)",
             "   " + ", ".join(f"{status} {n}" for status, n in sorted(counts.items()))]
    for name, diff in sorted(outcome.survivors.items()):
        lines += ["", f"surviving ({outcome.statuses[name]}): {name}", diff]
    if outcome.equivalent:
        lines += ["", "explained in benchmarks/mutation.toml:"]
        lines += [f"  {e.kind}: {name}: {e.change}  -- {e.reason}" for name, e in sorted(outcome.equivalent.items())]
    for entry in outcome.stale:
        lines.append(f"stale equivalent entry (no such surviving mutant now): {entry.function}: {entry.change}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", default="all", help="a module name from benchmarks/mutation.toml, or all")
    parser.add_argument("--tests", nargs="+", help="test files or node ids to use instead of the module's own")
    parser.add_argument("--keep", action="store_true", help="reuse .mutation/<module>/ (rerun only what changed)")
    parser.add_argument("--max-children", type=int, help="mutants run at once (default: the config's, 1)")
    parser.add_argument("--list", action="store_true", help="print the modules and their tests, run nothing")
    args = parser.parse_args(argv)

    settings, modules = load_config()
    if args.module != "all" and args.module not in modules:
        parser.error(f"unknown module '{args.module}' (known: {', '.join(modules)}, all)")
    chosen = list(modules.values()) if args.module == "all" else [modules[args.module]]
    if args.list:
        for module in chosen:
            print(f"{module.name}: {' '.join(module.paths)}\n  tests: {' '.join(module.tests)}"
                  + (f" (-m '{module.markers}')" if module.markers else ""))
        return 0
    unexplained = 0
    summary = []
    for module in chosen:
        outcome = run_module(module, settings, args.tests or module.tests, args.keep,
                             args.max_children or settings.max_children)
        print(report(outcome), flush=True)
        print()
        unexplained += len(outcome.survivors)
        score = f"{100 * outcome.score:5.1f}%" if outcome.score is not None else "  n/a"
        summary.append(f"{module.name:<10} {score}  killed {outcome.detected:>4} / {outcome.planted:<4} "
                       f"equivalent {outcome.equivalents:>3}  untestable {len(outcome.equivalent) - outcome.equivalents:>3}"
                       f"  surviving {len(outcome.survivors):>3}")
    print("module     score   killed / planted  equivalent  untestable  surviving")
    print("\n".join(summary))
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
