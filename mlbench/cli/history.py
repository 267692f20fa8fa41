"""`mlbench history`: recorded runs and one metric's trend per variant of each pipeline."""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection

from mlbench.cli.compare import HISTORY_HELP, db_path, pipeline_of
from mlbench.cli.parsing import add_format
from mlbench.plugins.commands import add_command

SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float]) -> str:
    if not values:
        return ""
    lo, hi = min(values), max(values)
    if hi == lo:
        return SPARKS[3] * len(values)
    return "".join(SPARKS[round((v - lo) / (hi - lo) * (len(SPARKS) - 1))] for v in values)


def _table(rows: list[list[str]], right: Collection[int] = frozenset()) -> list[str]:
    from mlbench.report.text import printable

    rows = [[printable(c) for c in r] for r in rows]  # names from the history never drive the terminal
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]


def cmd_history(args: argparse.Namespace) -> int:
    from mlbench.config.base import suggest
    from mlbench.metrics import ESTIMATE_MARK, estimate_mark, format_value, info, known_names
    from mlbench.store.history import list_runs, metric_series

    pipeline = pipeline_of(args)
    db = db_path(args, pipeline)
    name = pipeline.config.name if pipeline is not None else args.name
    runs = list_runs(db, pipeline=name, model=args.model, limit=args.limit)
    series = metric_series(db, args.metric, pipeline=name, model=args.model, limit=args.limit) if runs else {}
    if not series and info(args.metric) is None:  # a name no backend gives and no run holds: a typo, exit 2
        from mlbench.errors import UserError

        raise UserError(f"unknown metric '{args.metric}'{suggest(args.metric, known_names())}", where="--metric")
    if args.format == "json":
        print(json.dumps({
            "db": str(db), "metric": args.metric,
            "runs": [{"run_id": r.run_id, "created": r.created, "pipeline": r.pipeline_name,
                      "pipeline_path": r.pipeline_path, "git_commit": r.git_commit, "machine": r.machine_words,
                      "summary": r.summary} for r in runs],
            "series": [{"pipeline": key.pipeline, "variant": key.variant_id,
                        "points": [{"run_id": p.run_id, "created": p.created, "value": p.value, "source": p.source}
                                   for p in points]} for key, points in series.items()],
        }, indent=2))
        return 0
    scope = "".join([f" of pipeline {name}" if name else "", f" with model {args.model}" if args.model else ""])
    if not runs:
        print(f"no runs{scope} in {db}")
        return 0
    print(f"{len(runs)} runs{scope} in {db}, oldest first")
    rows = [["run", "created", "pipeline", "commit", "machine", "ok", "failed", "skipped"]]
    for r in runs:
        rows.append([r.run_id, r.created, r.pipeline_name, (r.git_commit or "–")[:10], r.machine_words[:40],
                     *(str(r.summary.get(s, 0)) for s in ("ok", "failed", "skipped"))])
    print("\n".join(_table(rows, right={5, 6, 7})))

    if not series:
        print(f"\nno figures of {args.metric} in these runs")  # a known name (an unknown one is refused above)
        return 0
    several = len({key.pipeline for key in series}) > 1
    rows = [[*(["pipeline"] if several else []), "variant", "runs", "first", "last", "change", "trend"]]
    known = info(args.metric)
    unit = known.unit if known is not None else ""
    without = 0
    for key, points in series.items():
        values = [p for p in points if p.value is not None]
        if not values:
            without += 1  # e.g. Core ML variants recorded on Linux, where they are not timed
            continue
        figures = [p.value for p in values if p.value is not None]
        first, last = values[0], values[-1]
        change = f"{(figures[-1] / figures[0] - 1) * 100:+.1f}%" if figures[0] else "–"
        rows.append([*([key.pipeline] if several else []), key.variant_id, str(len(values)),
                     estimate_mark(first.source) + format_value(first.value, unit),
                     estimate_mark(last.source) + format_value(last.value, unit), change, sparkline(figures)])
    per = "pipeline and variant" if several else "variant"
    print(f"\n{args.metric} per {per}, oldest → newest ({ESTIMATE_MARK} estimated):")
    offset = 1 if several else 0
    print("\n".join(_table(rows, right={1 + offset, 2 + offset, 3 + offset, 4 + offset})))
    if without:
        print(f"({without} more variants have no {args.metric} in these runs: absent, with the reason, in their reports)")
    return 0


def register(subparsers) -> None:
    p = add_command(subparsers, "history", "list recorded runs and a metric's trend per variant",
                    "Each pipeline's variants are their own trends: the same variant id in two pipelines is\n"
                    "two lines. Without --pipeline or --name, every pipeline in the history is listed.")
    p.add_argument("--model", metavar="M", help="only runs (and variants) of this model")
    p.add_argument("--metric", default="latency.median", metavar="NAME", help="trend of this metric (default latency.median)")
    p.add_argument("--pipeline", metavar="FILE", help="only runs of this pipeline, from its history")
    p.add_argument("--name", metavar="PIPELINE", help="only runs of the pipeline with this name")
    p.add_argument("--db", metavar="PATH", help=HISTORY_HELP)
    p.add_argument("--limit", type=int, default=20, metavar="N", help="the newest N runs (default 20)")
    add_format(p, "text", "json")
    p.set_defaults(func=cmd_history)
