"""`mlbench plan`: the variants a pipeline expands to, or what a change to the file does to them.

    mlbench plan FILE                      the variants, the artifact each measures, the counts
    mlbench plan --diff BASE HEAD          two versions of a pipeline file: added, removed, changed
    mlbench plan --against REF FILE        FILE as it is now against FILE at git revision REF
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from mlbench.errors import UserError
from mlbench.plugins.commands import add_command

if TYPE_CHECKING:
    from mlbench.config.pipeline import PipelineConfig


def _plan_table(args: argparse.Namespace) -> int:
    from mlbench.matrix import Plan, expand
    from mlbench.validate import load_pipeline

    pipeline = load_pipeline(args.file)
    plan = Plan(expand(pipeline.config))
    if args.format == "json":
        print(json.dumps({
            "pipeline": pipeline.config.name, "file": args.file,
            "counts": {"variants": len(plan.variants), "artifacts": len(plan.artifact_groups()),
                       "models": len(plan.by_model())},
            "variants": [{"id": v.id, "model": v.model, "backend": v.backend, "axes": dict(v.axes),
                          "artifact": v.artifact_id, "artifact_axes": list(v.artifact_axes)} for v in plan.variants],
        }, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{pipeline.config.name}: variants", title_justify="left")
    headers = ("#", "variant", "artifact", "measurement-only axes")
    for column in headers:
        table.add_column(column, no_wrap=True)
    rows = []
    for i, v in enumerate(plan.variants, 1):
        measured = ", ".join(f"{k}={val}" for k, val in v.axes if k not in v.artifact_axes) or "–"
        rows.append((str(i), v.id, v.artifact_id, measured))
        table.add_row(*rows[-1])
    needed = sum(max(len(row[c]) for row in [headers, *rows]) + 3 for c in range(4)) + 1
    console = Console(width=max(Console().width, needed))  # ids are never cut, even in a CI log
    console.print(table)
    console.print(f"{len(plan.variants)} variants, {len(plan.artifact_groups())} artifacts to build, "
                  f"{len(plan.by_model())} models")
    return 0


def file_at_revision(path: Path, ref: str) -> bytes | None:
    """The file's bytes at git revision `ref`, or None when it does not exist there (a new file)."""
    folder, name = path.resolve().parent, path.name
    try:
        result = subprocess.run(["git", "-C", str(folder), "show", f"{ref}:./{name}"], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise UserError(f"--against: cannot run git: {exc}", file=path) from None
    if result.returncode == 0:
        return result.stdout
    err = result.stderr.decode("utf-8", "replace").strip().splitlines()
    message = err[-1] if err else f"git exited with {result.returncode}"
    if "does not exist in" in message or "exists on disk, but not in" in message:
        return None
    raise UserError(f"--against {ref}: {message.removeprefix('fatal: ')}", file=path)


def _diff(args: argparse.Namespace) -> int:
    from mlbench.plan_diff import diff_plans
    from mlbench.validate import load_pipeline, load_pipeline_text

    base: PipelineConfig | None
    if args.diff:
        base_path, head_path = args.diff
        base, base_label = load_pipeline(base_path).config, base_path
    else:
        head_path = args.file
        text = file_at_revision(Path(head_path), args.against)
        base_label = f"{args.against}:{head_path}"
        base = None if text is None else load_pipeline_text(text, base_label).config
        if text is None:
            base_label += " (not in that revision)"
    diff = diff_plans(base, load_pipeline(head_path).config, base_label, head_path)
    if args.format == "json":
        print(json.dumps(diff.to_json(), indent=2))
    else:
        from mlbench.report.markdown.plan import render_plan_diff_markdown

        print(render_plan_diff_markdown(diff), end="")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    if args.diff and (args.file or args.against):
        raise UserError("plan: give either --diff BASE HEAD, or FILE (with --against REF to diff it)")
    if not args.diff and not args.file:
        raise UserError("plan: give a pipeline FILE, or --diff BASE HEAD")
    if args.diff or args.against:
        args.format = args.format or "markdown"
        if args.format == "text":
            raise UserError("plan: a diff is markdown or json; --format text is for one file's variants")
        return _diff(args)
    args.format = args.format or "text"
    if args.format == "markdown":
        raise UserError("plan: --format markdown is for a diff (--diff or --against); one file's plan is text or json")
    return _plan_table(args)


def register(subparsers) -> None:
    p = add_command(
        subparsers, "plan", "show the variants a pipeline expands to, or what a change does to them",
        "mlbench plan FILE                  the variants, the artifact each measures, the counts\n"
        "mlbench plan --diff BASE HEAD      variants and artifacts added, removed and changed between two\n"
        "                                   versions of a pipeline file (Markdown for a pull request)\n"
        "mlbench plan FILE --against REF    FILE now against FILE at git revision REF (e.g. origin/main)\n\n"
        "Nothing is built or imported beyond the config: fast enough for every pull request.",
    )
    p.add_argument("file", metavar="FILE", nargs="?", help="a pipeline file")
    p.add_argument("--diff", nargs=2, metavar=("BASE", "HEAD"), help="two versions of a pipeline file to compare")
    p.add_argument("--against", metavar="REF", help="compare FILE with its version at this git revision")
    p.add_argument("--format", choices=("text", "markdown", "json"), default=None,
                   help="text (one file; the default), markdown (a diff; the default), or json (either)")
    p.set_defaults(func=cmd_plan)
