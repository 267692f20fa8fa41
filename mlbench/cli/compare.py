"""`mlbench compare`: the command-line side of mlbench/compare (and the history helpers `history` shares).

`register(subparsers)` adds the command to the main parser. Exit codes of compare: 0 no
regression, 1 a regression, 2 bad input (a missing file, a bad rule, an unknown run).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from mlbench.cli.parsing import add_format
from mlbench.errors import UserError
from mlbench.plugins.commands import add_command

if TYPE_CHECKING:
    from mlbench.records import RunReport

HISTORY_HELP = ("run history database (default: the --pipeline file's history, else $MLBENCH_HISTORY, "
                "else mlbench-history.sqlite beside the default cache folder)")


def db_path(args: argparse.Namespace, pipeline) -> Path:
    from mlbench.store.history import default_history_path

    if args.db:
        return Path(args.db)
    if pipeline is not None:
        return pipeline.history_path
    return default_history_path()


def pipeline_of(args: argparse.Namespace):
    if not args.pipeline:
        return None
    from mlbench.validate import load_pipeline

    return load_pipeline(args.pipeline)


def _read_report(path: Path) -> RunReport:
    from mlbench.compare.report_file import read_report_file

    return read_report_file(path)


def _is_reference(text: str) -> bool:
    from mlbench.store.history import REFERENCES

    return text in REFERENCES or re.fullmatch(r"[0-9a-f]{4,64}", text) is not None


class Operand:
    """A BASE or HEAD operand: a report file or folder, else a history reference."""

    def __init__(self, text: str) -> None:
        self.text = text
        path = Path(text)
        if path.is_dir():
            path = path / "report.json"
        self.path = path if path.exists() or not _is_reference(text) else None
        self.report: RunReport | None = None
        self.commit: str | None = None

    def load_file(self) -> None:
        if self.path is None:
            return
        if not self.path.exists():
            raise UserError(f"{self.text}: no such report file, and not a history reference "
                            "(last, last-on-this-machine or a run id)")
        self.report = _read_report(self.path)

    def load_reference(self, db: Path, pipeline_name: str | None, exclude: tuple[str, ...]) -> RunReport:
        from mlbench.compare.report_check import check_report
        from mlbench.store.history import resolve

        report, row = resolve(db, self.text, pipeline=pipeline_name, exclude=exclude)
        check_report(report, db, run=report.run_id)
        self.report = report
        self.commit = row.git_commit
        self.text = f"{self.text} (history {db})"
        return report


def _commit_from_history(db: Path, run_id: str) -> str | None:
    if not db.exists():
        return None
    try:
        from mlbench.store.history import load_report

        return load_report(db, run_id)[1].git_commit
    except UserError:
        return None


def cmd_compare(args: argparse.Namespace) -> int:
    from mlbench.compare.comparison import RuleError, compare, default_rules, parse_rules
    from mlbench.store.history import HistoryError

    pipeline = pipeline_of(args)
    texts = args.fail_on or (list(pipeline.config.report.gate) if pipeline is not None else []) or default_rules()
    try:
        rules = parse_rules(texts)
    except RuleError as exc:
        raise UserError(f"--fail-on: {exc}") from None
    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha: {args.alpha:g} is not between 0 and 1")

    db = db_path(args, pipeline)
    base, head = Operand(args.base), Operand(args.head)
    base.load_file()
    head.load_file()
    name = pipeline.config.name if pipeline is not None else None
    if head.report is None:
        other = base.report
        head_report = head.load_reference(db, name or (other.pipeline.name if other else None),
                                          (other.run_id,) if other else ())
    else:
        head_report = head.report
    if base.report is None:
        try:
            base_report = base.load_reference(db, name or head_report.pipeline.name, (head_report.run_id,))
        except HistoryError as exc:
            if not args.allow_missing_base:
                raise
            note = f"Nothing to compare with: {exc.what} ({db}). This run is the first; later runs compare against it."
            if args.format == "json":  # what a nightly's parser reads: a comparison without a base
                from mlbench.compare.comparison import run_ref

                head_ref = run_ref(head_report, head.text, head.commit).model_dump(mode="json")
                print(json.dumps({"base": None, "head": head_ref, "rules": texts, "variants": [], "warnings": [note],
                                  "regressed": False, "counts": {}, "missing_base": note}, indent=2))
            else:
                print(f"## mlbench compare: {head_report.pipeline.name}\n\n{note}")
            return 0
    else:
        base_report = base.report
    for operand, report in ((base, base_report), (head, head_report)):
        if operand.commit is None:
            operand.commit = _commit_from_history(db, report.run_id)

    comparison = compare(base_report, head_report, rules, alpha=args.alpha, base_label=base.text,
                         head_label=head.text, base_commit=base.commit, head_commit=head.commit)
    if args.format == "json":
        from mlbench.report.text import json_text

        print(json_text(comparison.model_dump_json(indent=2)))
    else:
        from mlbench.report.markdown.compare import render_comparison_markdown

        print(render_comparison_markdown(comparison), end="")
    return 1 if comparison.regressed else 0


def register(subparsers) -> None:
    """Add `compare` to mlbench's subcommands."""
    from mlbench.compare.noise import DEFAULT_ALPHA

    p = add_command(
        subparsers, "compare", "compare two runs and gate regressions (exit 1 on a regression)",
        "BASE and HEAD are report.json files (or their folders) or history references: last,\n"
        "last-on-this-machine, or a run id.\n\n"
        "Rules: METRIC:+N% (a relative change), METRIC:-Npp (percentage points), METRIC:>N (a limit),\n"
        "status:failed. Default: the --fail-on rules, else the --pipeline file's report.gate, else\n"
        "latency.median:+10%, placement.neural_engine:-5pp, status:failed.\n\n"
        "Exit codes: 0 no regression, 1 a regression, 2 bad input (a missing file, a bad rule, an unknown run).",
    )
    p.add_argument("base", metavar="BASE", help="the run before: a report.json, its folder or a history reference")
    p.add_argument("head", metavar="HEAD", help="the run after, the same way")
    p.add_argument("--fail-on", action="append", metavar="RULE",
                   help="a regression rule, e.g. latency.median:+10%%; repeatable")
    add_format(p, "markdown", "json")
    p.add_argument("--pipeline", metavar="FILE", help="take gate rules and the history path from this pipeline")
    p.add_argument("--db", metavar="PATH", help=HISTORY_HELP)
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                   help=f"significance level of the noise test (default {DEFAULT_ALPHA:g})")
    p.add_argument("--allow-missing-base", action="store_true",
                   help="exit 0 with a note when BASE is a history reference and no earlier run exists")
    p.set_defaults(func=cmd_compare)
