"""`mlbench ab BASE HEAD` (or `mlbench ab HEAD --git-base REF`): the matching variants of two pipelines
measured alternately on this machine, judged by paired statistics; output and exit codes as
`mlbench compare` (0 no regression, 1 a regression, 2 bad input, 130 interrupted)."""

from __future__ import annotations

import argparse
import fnmatch
import io
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlbench.errors import UserError
from mlbench.report.text import json_text, printable


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        raise UserError(f"--git-base: cannot run git: {exc}") from None


@contextmanager
def pipeline_at_revision(path: Path, ref: str) -> Iterator[tuple[Path, str]]:
    """The repository holding `path`, as it was at `ref`, in a temporary folder: (the pipeline file
    there, the commit). Model files the pipeline names by path come from that revision too."""
    folder = path.resolve().parent
    top = _git(folder, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise UserError("not inside a git repository: --git-base needs one", file=path)
    root = Path(top.stdout.decode().strip())
    commit = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if commit.returncode != 0:
        raise UserError(f"--git-base: git knows no commit '{ref}' in {root}")
    sha = commit.stdout.decode().strip()
    archive = _git(root, "archive", "--format=tar", sha)
    if archive.returncode != 0:
        raise UserError(f"--git-base: git archive {ref} failed: {archive.stderr.decode().strip()[:200]}")
    relative = path.resolve().relative_to(root)
    with tempfile.TemporaryDirectory(prefix="mlbench-ab-base-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            try:
                tar.extractall(tmp, filter="data")
            except TypeError:  # Python < 3.10.12 has no extraction filters; git archive writes plain files
                tar.extractall(tmp)
        base = Path(tmp) / relative
        if not base.is_file():
            raise UserError(f"--git-base: {relative.as_posix()} does not exist at {ref} ({sha[:10]})")
        yield base, sha


def _variant_filter(patterns: list[str] | None):
    if not patterns:
        return None
    return lambda variant_id: any(fnmatch.fnmatchcase(variant_id, p) for p in patterns)


def cmd_ab(args: argparse.Namespace) -> int:
    from mlbench.compare.paired import DEFAULT_MIN_ROUNDS
    from mlbench.compare.rules import RuleError, default_rules, parse_rules
    from mlbench.config.pipeline import CacheSettings
    from mlbench.config.pipeline_file import Pipeline
    from mlbench.run.ab import AbSettings, run_ab
    from mlbench.validate import load_pipeline

    if args.git_base is None and args.head is None:
        raise UserError("mlbench ab: give BASE and HEAD pipeline files, or one file and --git-base REF")
    if args.git_base is not None and args.head is not None:
        raise UserError("mlbench ab: --git-base takes one pipeline file (HEAD); BASE is that file at the revision")
    for name in ("rounds", "calls", "instances"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.min_rounds is not None and not 1 <= args.min_rounds <= args.rounds:
        raise UserError(f"--min-rounds must be between 1 and --rounds ({args.rounds}), got {args.min_rounds}")
    if args.warmup < 0:
        raise UserError(f"--warmup must be at least 0, got {args.warmup}")
    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha: {args.alpha:g} is not between 0 and 1")
    head_file = Path(args.head if args.git_base is None else args.base)
    head = load_pipeline(head_file)
    texts = args.fail_on or list(head.config.report.gate) or default_rules()
    try:
        rules = parse_rules(texts)
    except RuleError as exc:
        raise UserError(f"--fail-on: {exc}") from None
    min_rounds = args.min_rounds if args.min_rounds is not None else min(DEFAULT_MIN_ROUNDS, args.rounds)
    settings = AbSettings(rounds=args.rounds, calls=args.calls, warmup=args.warmup, min_rounds=min_rounds,
                          instances=args.instances)

    def report(variant_id: str, outcome: str) -> None:
        if not args.quiet:
            print(printable(f"ab: {variant_id}: {outcome}"), file=sys.stderr, flush=True)

    def compare_with(base: Pipeline, base_label: str, base_commit: str | None) -> int:
        try:
            comparison = run_ab(base, head, rules, settings=settings, alpha=args.alpha,
                                select=_variant_filter(args.variant), on_variant=report, base_label=base_label,
                                head_label=str(head_file), base_commit=base_commit)
        except KeyboardInterrupt:
            print("interrupted: nothing was compared", file=sys.stderr)
            return 130
        if args.format == "json":
            print(json_text(comparison.model_dump_json(indent=2)))
        else:
            from mlbench.report.markdown.compare import render_comparison_markdown

            print(render_comparison_markdown(comparison), end="")
        return 1 if comparison.regressed else 0

    if args.git_base is None:
        return compare_with(load_pipeline(args.base), args.base, None)
    with pipeline_at_revision(head_file, args.git_base) as (base_file, sha):
        base = load_pipeline(base_file)
        # one cache for both sides: entries are keyed by content, and the revision's folder is temporary
        config = base.config.model_copy(update={"cache": CacheSettings(dir=head.cache_dir)})
        base = Pipeline(config=config, path=base.path, sha256=base.sha256)
        return compare_with(base, f"{head_file} at {args.git_base}", sha)


def register(subparsers) -> None:
    """Add `ab` to mlbench's subcommands."""
    from mlbench.cli.parsing import add_format
    from mlbench.compare.noise import DEFAULT_ALPHA
    from mlbench.compare.paired import (
        DEFAULT_CALLS,
        DEFAULT_INSTANCES,
        DEFAULT_MIN_ROUNDS,
        DEFAULT_ROUNDS,
        DEFAULT_WARMUP,
    )
    from mlbench.plugins.commands import add_command
    p = add_command(
        subparsers, "ab", "measure two pipelines' matching variants alternately on this machine (exit 1 on a regression)",
        "BASE and HEAD are pipeline files; or give HEAD alone with --git-base REF: BASE is the same file (and\n"
        "its repository) at that git revision. Variants with the same id are exported as usual, then timed in\n"
        "alternating rounds (A B, B A, ...) so that the machine's drift hits both sides; the verdict uses paired\n"
        "statistics over the rounds (Wilcoxon signed-rank; the Hodges-Lehmann ratio and its interval). After\n"
        "--min-rounds, and every 20 rounds after, ab stops early once more rounds could not change any latency\n"
        "rule's verdict (the interval lies wholly past or wholly within each threshold).\n\n"
        "Rules and output as mlbench compare. Default rules: the --fail-on rules, else HEAD's report.gate,\n"
        "else mlbench's defaults.\n\n"
        "Exit codes: 0 no regression, 1 a regression, 2 bad input, 130 interrupted.",
    )
    p.add_argument("base", metavar="BASE", help="the pipeline file before (or HEAD's file, with --git-base)")
    p.add_argument("head", metavar="HEAD", nargs="?", help="the pipeline file after")
    p.add_argument("--git-base", metavar="REF", help="BASE is the HEAD file (and its repository) at this git revision")
    p.add_argument("--fail-on", action="append", metavar="RULE",
                   help="a regression rule, e.g. latency.median:+5%%; repeatable")
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                   help=f"the most interleaved rounds per variant (default {DEFAULT_ROUNDS})")
    p.add_argument("--min-rounds", type=int, metavar="N",
                   help=f"rounds before ab may stop early (default {DEFAULT_MIN_ROUNDS}, or --rounds when smaller; "
                   "equal to --rounds: always run them all)")
    p.add_argument("--calls", type=int, default=DEFAULT_CALLS,
                   help=f"timed calls per side per round (default {DEFAULT_CALLS})")
    p.add_argument("--warmup", type=int, default=DEFAULT_WARMUP,
                   help=f"untimed calls before each side's timed calls (default {DEFAULT_WARMUP})")
    p.add_argument("--instances", type=int, default=DEFAULT_INSTANCES, metavar="N",
                   help=f"copies of each side's model, each loaded into memory of its own, taking the rounds in "
                   f"turn: where a model lands in memory shifts its speed (default {DEFAULT_INSTANCES}; memory: N "
                   "copies per side)")
    p.add_argument("--variant", action="append", metavar="PATTERN",
                   help="only variants whose id matches this glob (repeatable)")
    add_format(p, "markdown", "json")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                   help=f"significance level of the paired test (default {DEFAULT_ALPHA:g})")
    p.add_argument("-q", "--quiet", action="store_true", help="no line per variant on stderr")
    p.set_defaults(func=cmd_ab)
