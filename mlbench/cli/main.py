"""The `mlbench` command: a thin layer over the Python API. `plan`, `compare` and `history` live in their
own modules beside this one.

Exit codes: EXIT_CODES below (also in `mlbench --help` and the README).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from mlbench import __version__
from mlbench.errors import UserError


def _err(text: str) -> None:
    from mlbench.report.text import printable

    print(printable(text), file=sys.stderr, flush=True)  # what a file or a model said never drives the terminal


def cmd_validate(args: argparse.Namespace) -> int:
    from mlbench.config.pipeline_file import PipelineInvalid
    from mlbench.validate import load_pipeline

    failed = 0
    results = []
    for path in args.files:
        try:
            load_pipeline(path)
        except UserError as exc:
            failed += 1
            errors = exc.errors if isinstance(exc, PipelineInvalid) else [exc]
            results.append({"file": path, "ok": False, "errors": [
                {"line": e.line, "col": e.col, "where": e.where, "message": e.what} for e in errors]})
            if args.format == "text":
                _err(str(exc))
        else:
            results.append({"file": path, "ok": True, "errors": []})
            if args.format == "text" and not args.quiet:
                print(f"{path}: ok")
    if args.format == "json":
        print(json.dumps(results, indent=2))
    return 2 if failed else 0


def _executor_address(text: str | None) -> str | None:
    """`dask://host:8786` (or a tcp:// address) → the scheduler address Dask takes."""
    if text is None:
        return None
    if text.startswith("dask://"):
        return "tcp://" + text[len("dask://"):]
    if text.startswith(("tcp://", "tls://")):
        return text
    raise UserError(f"--executor: '{text}' is not a Dask scheduler address; use dask://host:8786")


def cmd_run(args: argparse.Namespace) -> int:
    from mlbench.run.executors import default_jobs
    from mlbench.run.progress import for_terminal
    from mlbench.run.runner import run
    from mlbench.validate import load_pipeline

    if args.retry_crashed and not args.resume:
        raise UserError("--retry-crashed: only with --resume (it measures again a variant the last run died on)")
    pipeline = load_pipeline(args.file)
    address = _executor_address(args.executor)
    jobs = args.jobs if args.jobs is not None else default_jobs()
    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    against = _base_report(args.against, pipeline) if args.against else None  # a bad BASE stops before the run
    progress = for_terminal(quiet=args.quiet, verbose=args.verbose)
    from mlbench.run.signals import Stopped, stopping_on_sigterm

    try:
        with stopping_on_sigterm():  # `timeout`, a CI cancel, `docker stop`: the path Ctrl-C takes
            report = run(pipeline, progress, jobs=jobs, executor=address, resume=args.resume,
                         retry_crashed=args.retry_crashed, against=against)
    except KeyboardInterrupt as exc:
        stopped = exc if isinstance(exc, Stopped) else Stopped()
        what = "interrupted" if stopped.exit_code == 130 else f"stopped by {exc}"
        partial = ("a partial report beside it" if stopped.partial_written else
                   stopped.why_not or "no partial report")
        _err(f"{what}: finished records are kept in {pipeline.report_dir / 'journal.jsonl'} and {partial}; run "
             f"`mlbench run {args.file} --resume` to finish the rest")
        return stopped.exit_code
    from mlbench.run.work import final_line

    _err(final_line(report, str(pipeline.report_dir)))
    return 1 if report.summary.get("failed") else 0


def _base_report(text: str, pipeline):
    """`--against`'s run: a report file or folder, else a history reference resolved in the pipeline's history
    (before this run is added to it, so `last` is the run before this one)."""
    from mlbench.cli.compare import Operand

    base = Operand(text)
    try:
        base.load_file()
        if base.report is not None:
            return base.report
        return base.load_reference(pipeline.history_path, pipeline.config.name, ())
    except UserError as exc:  # the option named, as every other option's error is
        raise UserError(f"--against: {exc}") from None


def cmd_schema(args: argparse.Namespace) -> int:
    from mlbench.config.pipeline import pipeline_schema
    from mlbench.report.json_report import report_schema

    schemas = {"pipeline": pipeline_schema(), "report": report_schema()}
    if args.write is None:
        print(json.dumps(schemas[args.which], indent=2))
        return 0
    out = Path(args.write)
    out.mkdir(parents=True, exist_ok=True)
    for name, schema in schemas.items():
        path = out / f"{name}.schema.json"
        path.write_text(json.dumps(schema, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    return 0


def _cache(args: argparse.Namespace):
    from mlbench.store.cache import ArtifactCache, default_cache_dir

    cache = ArtifactCache(Path(args.dir) if args.dir else default_cache_dir())
    cache.claim(create=False)  # a folder that is not mlbench's cache: one line, nothing read or removed
    return cache


def cmd_cache_ls(args: argparse.Namespace) -> int:
    from datetime import datetime

    from mlbench.report.text import printable
    from mlbench.store.cache import format_size

    cache = _cache(args)
    entries = sorted(cache.entries(), key=lambda e: e.last_used, reverse=True)  # by key among equals: stable
    label = lambda meta: printable(meta.get("label") or meta.get("key_inputs", {}).get("backend", "?"))  # noqa: E731
    if args.format == "json":
        print(json.dumps({"root": str(cache.root), "total_bytes": sum(e.size_bytes for e in entries),
                          "order": "last_used, newest first", "entries": [
            {"key": e.key, "size_bytes": e.size_bytes, "last_used": datetime.fromtimestamp(e.last_used).isoformat(
                timespec="seconds"), "label": label(e.meta), "path": str(e.path)} for e in entries]}, indent=2))
        return 0
    for entry in entries:
        used = datetime.fromtimestamp(entry.last_used).strftime("%Y-%m-%d %H:%M")
        print(f"{entry.key[:12]}  {format_size(entry.size_bytes):>9}  used {used}  {label(entry.meta)}")
    order = " (most recently used first)" if len(entries) > 1 else ""
    print(f"{len(entries)} {'entry' if len(entries) == 1 else 'entries'}, "
          f"{format_size(sum(e.size_bytes for e in entries))} in {cache.root}{order}")
    return 0


def cmd_cache_info(args: argparse.Namespace) -> int:
    entry = _cache(args).find(args.key)
    print(json.dumps(entry.summary(), indent=2))
    return 0


def cmd_cache_prune(args: argparse.Namespace) -> int:
    from mlbench.store.cache import format_size, parse_size

    cache = _cache(args)
    removed = cache.prune(parse_size(args.max_size))
    print(f"removed {len(removed)} entries ({format_size(sum(e.size_bytes for e in removed))}); "
          f"{format_size(cache.total_bytes())} left in {cache.root}{_kept(cache)}")
    return 0


def cmd_cache_verify(args: argparse.Namespace) -> int:
    """Hash every entry, whatever the stat state says; evict the corrupt ones (exit 1 if any)."""
    from mlbench.report.text import printable
    from mlbench.store.cache import format_size

    cache = _cache(args)
    results = cache.verify()
    bad = [(entry, why) for entry, why in results if why is not None]
    for entry, why in bad:
        label = entry.meta.get("label") or entry.meta.get("key_inputs", {}).get("backend", "?")
        outcome = "" if os.path.lexists(entry.path) else "; evicted, the next run rebuilds it"
        print(printable(f"{entry.key[:12]}  {label}: {why}{outcome}"))
    size = format_size(sum(entry.size_bytes for entry, _ in results))
    verdict = f"{len(bad)} corrupt" if bad else "all intact"
    print(f"verified {len(results)} entries ({size}) in {cache.root}: {verdict}")
    return 1 if bad else 0


def cmd_cache_clear(args: argparse.Namespace) -> int:
    cache = _cache(args)
    print(f"removed {cache.clear()} entries from {cache.root}{_kept(cache)}")
    return 0


def _kept(cache) -> str:
    """What a clear or prune left because a run is measuring it (the entry is pinned: `store/pins.py`)."""
    n = cache.pins.kept_in_use
    return f"; kept {n} {'entry' if n == 1 else 'entries'} a run is using" if n else ""


def _count(text: str) -> int:
    """A flag's count: a whole number, 0 or more (argparse says what else was given, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _inspectors() -> list:
    from mlbench.plugins.registry import specs

    return [spec for spec in specs().values() if spec.inspect is not None]


def cmd_inspect(args: argparse.Namespace) -> int:
    """Hand the path to the backend whose artifact files end as it does (else the first that inspects)."""
    from mlbench.plugins.spec import load_attr

    inspectors = _inspectors()
    if not inspectors:
        raise UserError("no registered backend can inspect files")
    name = args.path.rstrip("/\\").lower()
    chosen = next((s for s in inspectors if name.endswith(s.inspect.suffixes)), inspectors[0])
    return load_attr(chosen.inspect.run)(args)


def cmd_rules(args: argparse.Namespace) -> int:
    """The rules behind each backend's estimates, with their sources, for a reviewer to audit."""
    from mlbench.plugins.registry import specs
    from mlbench.plugins.spec import load_attr

    tables = {name: load_attr(spec.rules)() for name, spec in specs().items() if spec.rules is not None}
    if args.json:
        print(json.dumps(tables, indent=2))
        return 0
    for name, rows in tables.items():
        print(f"{name}: {len(rows)} rules (confidence: high = Apple's word, medium = a public compute plan or "
              "Xcode report, low = a community claim or mlbench's assumption)\n")
        for row in rows:
            print(f"{row['id']} [{row['kind']}, {row['confidence']}]: {row['applies_to']}")
            print(f"    {row['says']}")
            print(f"    source: {row['source']}\n")
    return 0


EXIT_CODES = """\
exit codes:
  0    success
  1    the run finished and some variant failed (the others still ran; the report says why); for compare:
       a regression
  2    a mistake in the input, one line each as FILE:LINE:COL: where: what
  3    the run could not finish; its partial report and journal are written (--resume goes on from there)
  130  interrupted (Ctrl-C); the partial report and the journal are written
  143  stopped by SIGTERM (timeout, a CI cancel, docker stop); the same

`mlbench COMMAND --help` describes a command and every option."""


def build_parser() -> argparse.ArgumentParser:
    from mlbench.cli.compare import register as register_compare
    from mlbench.cli.history import register as register_history
    from mlbench.cli.parsing import add_format
    from mlbench.plugins.commands import HelpFormatter, add_command

    parser = argparse.ArgumentParser(prog="mlbench", description="Benchmark ML models for on-device deployment.",
                                     epilog=EXIT_CODES, formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"mlbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = add_command(sub, "validate", "check pipeline files (fast; imports no ML framework)",
                    "Each problem is one line, FILE:LINE:COL: where: what. Exit 2 when any file has one.")
    p.add_argument("files", nargs="+", metavar="FILE", help="pipeline files (YAML)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    add_format(p, "text", "json")
    p.set_defaults(func=cmd_validate)

    from mlbench.cli.plan import register as register_plan

    register_plan(sub)
    from mlbench.cli.explain import register as register_explain

    register_explain(sub)

    p = add_command(sub, "run", "export, measure and report every variant",
                    "Exports each artifact once (cached by content), measures every variant one at a time,\n"
                    "verifies it against eager PyTorch and writes the reports the pipeline asks for. Every model\n"
                    "runs in a supervised child process under the pipeline's limits.\n"
                    "Exit 1 when some variant failed (the others still ran); 3 when the run could not finish.")
    p.add_argument("file", metavar="FILE", help="a pipeline file")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-variant lines")
    p.add_argument("-v", "--verbose", action="store_true", help="a plain line per stage instead of the live display")
    p.add_argument("-j", "--jobs", type=int, metavar="N",
                   help="exports at once, each in its own process (default: the CPUs this process may use, after "
                   "affinity and the container's quota); measurements always run one at a time")
    p.add_argument("--executor", metavar="dask://HOST:PORT", help="run on a Dask cluster (overrides the pipeline's executor)")
    p.add_argument("--resume", action="store_true",
                   help="reuse the last run's records whose variants and inputs are unchanged; run the rest")
    p.add_argument("--retry-crashed", action="store_true",
                   help="with --resume: measure again a variant the run died on twice (else it is failed)")
    p.add_argument("--against", metavar="BASE",
                   help="a base run to compare with: a report.json (or its folder) or a history reference (last, "
                   "last-on-this-machine, a run id); report.md then opens with what changed (the pipeline's "
                   "report.gate rules, else compare's defaults)")
    p.set_defaults(func=cmd_run)

    from mlbench.plugins.spec import load_attr

    inspectors = _inspectors()
    p = add_command(sub, "inspect", "static analysis of an exported model",
                    "Handled by the backend whose files end as PATH does: "
                    + "; ".join(s.inspect.describe for s in inspectors) + ".")
    p.add_argument("path", metavar="PATH", help="an exported model file or folder")
    p.add_argument("--json", action="store_true", help="print the analysis as JSON")
    p.add_argument("--max-layers", type=_count, default=None, metavar="N",
                   help="show at most N layers (0: only how many)")
    for spec in inspectors:
        load_attr(spec.inspect.configure)(p)
    p.set_defaults(func=cmd_inspect)

    from mlbench.plugins.registry import specs

    for spec in specs().values():  # backends' own commands
        for register in spec.commands:
            load_attr(register)(sub)

    p = add_command(sub, "rules", "list the rules behind estimated figures, each with its source and confidence")
    p.add_argument("--json", action="store_true", help="print the rules as JSON")
    p.set_defaults(func=cmd_rules)

    cache = add_command(sub, "cache", "the content-addressed artifact cache",
                        "Exported artifacts, keyed by the sha256 of everything that shapes them.")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    for name, func, helptext in (("ls", cmd_cache_ls, "list entries, most recently used first"),
                                 ("info", cmd_cache_info, "show one entry's metadata"),
                                 ("prune", cmd_cache_prune, "evict least recently used entries down to a size"),
                                 ("verify", cmd_cache_verify,
                                  "hash every entry (runs trust unchanged file stats); evict corrupt ones, exit 1"),
                                 ("clear", cmd_cache_clear, "remove every entry")):
        p = add_command(cache_sub, name, helptext)
        p.add_argument("--dir", metavar="DIR", help="cache folder (default: $MLBENCH_CACHE_DIR, else the user cache dir)")
        p.set_defaults(func=func)
        if name == "ls":
            add_format(p, "text", "json")
        if name == "info":
            p.add_argument("key", metavar="KEY", help="a key or a unique prefix of at least 4 characters")
        if name == "prune":
            p.add_argument("--max-size", required=True, metavar="SIZE", help="e.g. 5GB, 500MB")

    p = add_command(sub, "schema", "print or write the JSON schemas",
                    "pipeline.schema.json is what editors use to check pipeline files as you type\n"
                    "(# yaml-language-server: $schema=...); report.schema.json describes report.json.")
    p.add_argument("which", nargs="?", choices=("pipeline", "report"), default="pipeline",
                   help="which schema to print (default pipeline)")
    p.add_argument("--write", metavar="DIR", help="write pipeline.schema.json and report.schema.json into DIR")
    p.set_defaults(func=cmd_schema)

    register_compare(sub)
    register_history(sub)
    from mlbench.cli.ab import register as register_ab

    register_ab(sub)
    return parser


def _log_warnings_as_lines() -> None:
    """mlbench's warnings (e.g. a corrupt cache entry being rebuilt) as one plain line each."""
    import logging

    class CurrentStderr(logging.StreamHandler):
        """Writes to whatever sys.stderr is now (tests and wrappers replace it), control characters escaped."""

        stream = property(lambda self: sys.stderr, lambda self, value: None)

        def format(self, record: logging.LogRecord) -> str:
            from mlbench.report.text import printable

            return printable(super().format(record))

    logger = logging.getLogger("mlbench")
    if not logger.handlers:
        handler = CurrentStderr()
        handler.setFormatter(logging.Formatter("warning: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _log_warnings_as_lines()
    try:
        return args.func(args)
    except UserError as exc:
        _err(str(exc))
        return exc.exit_code
    except BrokenPipeError:  # `mlbench schema | head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
