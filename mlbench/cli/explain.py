"""`mlbench explain REPORT VARIANT`: where a variant of a finished run loses accuracy (`mlbench.run.explain`).

    mlbench explain reports/vit/report.json vit/coreml/all/float16/palettize4
    mlbench explain REPORT VARIANT --format json
    mlbench explain REPORT VARIANT --write-pipeline pipelines/vit.advised.yaml   # then: mlbench run it
"""

from __future__ import annotations

import argparse
import json

from mlbench.plugins.commands import add_command


def register(sub: argparse._SubParsersAction) -> None:
    from mlbench.cli.parsing import add_format

    p = add_command(sub, "explain", "where a variant loses accuracy, op by op and by PyTorch module",
                    "Reuses the localization the run made (for variants that failed verification or passed\n"
                    "within verify.localize_within of their limits); otherwise loads the report's pipeline and\n"
                    "localizes the variant now, or finds that localization in the artifact cache (exports come\n"
                    "from the cache; the time it took is stated, and whether it was cached).")
    p.add_argument("report", metavar="REPORT", help="a report.json")
    p.add_argument("variant", metavar="VARIANT", help="a variant id of that report")
    add_format(p, "markdown", "json")
    p.add_argument("--fresh", action="store_true",
                   help="localize again even when the report or the cache holds a localization")
    p.add_argument("--all", action="store_true", help="list every op, not only the top ones")
    p.add_argument("--write-pipeline", metavar="FILE",
                   help="write the report's pipeline with the advised recipe beside the variant's (same folder)")
    p.set_defaults(func=cmd_explain)


def cmd_explain(args: argparse.Namespace) -> int:
    from mlbench.report.localization import render_localization
    from mlbench.run.explain import advised_pipeline, explain

    found = explain(args.report, args.variant, fresh=args.fresh)
    if args.format == "json":
        print(json.dumps(json.loads(found.model_dump_json()), indent=2))
    else:
        print("\n".join(render_localization(found, every_op=args.all, heading="##")))
    if args.write_pipeline:
        written = advised_pipeline(args.report, found, args.write_pipeline)
        print(f"wrote {written}: run it with `mlbench run {written}`")
    return 0
