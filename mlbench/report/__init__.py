"""Reports: pure functions from a RunReport to JSON and Markdown, plus the one place that writes files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlbench.compare.comparison import Comparison
    from mlbench.config.pipeline_file import Pipeline
    from mlbench.records import RunReport


def write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename: a reader never sees half a report, and a symlink
    (or anything else) in the report's place is replaced, never written through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide the report from teammates
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:  # any failure, Ctrl-C included: no half-written file is left, and it re-raises
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # a full disk: name the report, not a descriptor
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


def write_reports(report: RunReport, pipeline: Pipeline, against: RunReport | None = None) -> dict[str, Path]:
    """Write every format the pipeline asks for; returns format → path. A record that breaks the report
    schema is written as failed, with the schema error as its reason; every other record is written.
    `against`: a base run; report.md and report.html open with what changed against it (the pipeline's gate
    rules, else compare's defaults)."""
    from mlbench.report.fit import fit_report
    from mlbench.report.json_report import ReportSchemaError, render_json
    from mlbench.report.markdown.layout import COMMENT_LIMIT
    from mlbench.report.markdown.run_report import render_markdown

    try:
        json_text = render_json(report)
    except ReportSchemaError:  # the runner fits each record as it finishes (inf in free-form details
        # included); this is the last guard, for a record that reaches here some other way
        report = fit_report(report)
        json_text = render_json(report)

    comparison = _comparison(against, report, pipeline) if against is not None else None

    def markdown(report: RunReport, limit: int | None = COMMENT_LIMIT) -> str:
        return render_markdown(report, limit=limit, comparison=comparison)

    def html(report: RunReport) -> str:
        from mlbench.report.html.page import render_html

        trends = _trends(report, pipeline)
        try:
            return render_html(report, trends=trends, comparison=comparison)
        except Exception as exc:  # whatever the history holds, the report is drawn from this run
            if not trends:
                raise
            import logging

            logging.getLogger("mlbench.report").warning("no trends in the HTML report: the history's figures do "
                                                        "not draw (%s)", type(exc).__name__)
            return render_html(report, trends={}, comparison=comparison)

    renderers = {"json": (lambda _report: json_text, "report.json"), "markdown": (markdown, "report.md"),
                 "html": (html, "report.html")}
    # every format is rendered before the first is written: the files change together, in a moment, never
    # report.json new while report.html, still rendering, is the previous run's
    texts = {fmt: renderers[fmt][0](report) for fmt in pipeline.config.report.formats}
    whole = markdown(report, limit=None) if "markdown" in texts else None
    written: dict[str, Path] = {}
    for fmt, text in texts.items():
        path = pipeline.report_dir / renderers[fmt][1]
        write_atomic(path, text)
        written[fmt] = path
    if whole is not None:  # report.md fits a pull-request comment; when it had to be cut, the rest is here
        from mlbench.report.markdown.run_report import FULL_NAME

        full = pipeline.report_dir / FULL_NAME
        if whole != texts["markdown"]:  # compared with what was written, never read back through the folder
            write_atomic(full, whole)
            written["markdown-full"] = full
        else:
            full.unlink(missing_ok=True)  # a stale one from an earlier, bigger run would mislead
    return written


def _comparison(base: RunReport, head: RunReport, pipeline: Pipeline) -> Comparison:
    """This run against `base`, judged by the pipeline's gate rules (else compare's defaults)."""
    from mlbench.compare.comparison import compare
    from mlbench.compare.rules import default_rules, parse_rules

    rules = parse_rules(list(pipeline.config.report.gate) or default_rules())
    return compare(base, head, rules, base_label=f"run {base.run_id}", head_label="this run")


def _trends(report: RunReport, pipeline: Pipeline, runs: int = 30) -> dict:
    """Earlier runs' latency medians of this pipeline, for the HTML trend charts; {} without history."""
    import logging

    from mlbench.errors import UserError
    from mlbench.store.history import metric_series

    path = pipeline.history_path
    if not pipeline.config.history.enabled or not path.exists():
        return {}
    try:
        series = metric_series(path, "latency.median", pipeline=report.pipeline.name, limit=runs)
        return {key.variant_id: points for key, points in series.items()}
    except (UserError, OSError) as exc:
        logging.getLogger("mlbench.report").warning("no trends in the HTML report: %s", exc)
        return {}
