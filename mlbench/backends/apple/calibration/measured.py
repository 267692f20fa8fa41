"""Measured Core ML records, read from report files or a history database, grouped by chip and OS.

A record counts when it is a Core ML variant that ran, its placement came from the compute plan
(``source: measured``), its latency was measured (Core ML's own median prediction time where the report
has it, else the wall-clock median) and its report keeps the program's analysis (the artifact's
``program``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mlbench.backends.apple.calibration.fitting import Case
from mlbench.backends.apple.calibration.signature import Key, empty_counts, tally
from mlbench.errors import UserError

if TYPE_CHECKING:
    from mlbench.records import RunRecord, RunReport

HISTORY_SUFFIXES = (".sqlite", ".sqlite3", ".db")


@dataclass
class Group:
    """The measured runs of one chip and OS."""

    chip: str
    chip_name: str
    os: str
    cases: list[Case] = field(default_factory=list)
    counts: dict[Key, Counter[str]] = field(default_factory=empty_counts)
    sources: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.chip} {self.os}"


def read_report(path: Path) -> RunReport:
    """A report file, read as compare reads one: a regular file only, numbers strictly typed."""
    from mlbench.compare.report_file import read_report_file

    return read_report_file(path, checked=False)


def reports(paths: list[Path]) -> list[tuple[str, RunReport]]:
    """Each report file as it is; a history database as every run it holds."""
    from mlbench.store.history import list_runs, load_report

    out = []
    for path in paths:
        if path.suffix in HISTORY_SUFFIXES:
            if not path.is_file():
                raise UserError("no such history database", file=path)
            out += [(f"{path.name}#{row.run_id}", load_report(path, row.run_id)[0]) for row in list_runs(path)]
        else:
            out.append((str(path), read_report(path)))
    return out


def machine_chip(machine: dict) -> tuple[str | None, str]:
    """The chip profile id of the machine that ran a report (None if no profile names its CPU), and its OS."""
    from mlbench.backends.apple.chips import builtin_chips, chip_for_machine

    system = str(machine.get("os") or "?")
    os_name = f"{'macOS' if system == 'Darwin' else system} {machine.get('os_version') or ''}".strip()
    return chip_for_machine(str(machine.get("cpu") or ""), builtin_chips()), os_name


def device_chip(record: RunRecord) -> tuple[str | None, str]:
    """The chip and OS of the connected iPhone or iPad a record was measured on (`details.device`), so that
    calibration keys on the device and not on the Mac it was attached to; (None, "") for a record measured here."""
    device = record.details.get("device")
    if not isinstance(device, dict) or not device.get("chip"):
        return None, ""
    return str(device["chip"]), f"{device.get('os') or 'iOS'} {device.get('os_version') or ''}".strip()


def measured_ms(record: RunRecord) -> float | None:
    own = record.metrics.get("latency.coreml_median")
    if own is not None and own.source == "measured" and own.value:
        return own.value
    if record.latency is not None and record.latency.source == "measured" and record.latency.median > 0:
        return record.latency.median
    return None


def gather(paths: list[Path]) -> tuple[dict[str, Group], list[str]]:
    """The measured Core ML runs in `paths` by chip and OS, and a line for each report or kind of record left out."""
    from mlbench.backends.apple.analysis import ProgramAnalysis
    from mlbench.backends.apple.chips import builtin_chips

    chips = builtin_chips()
    groups: dict[str, Group] = {}
    left_out: list[str] = []
    for label, report in reports(paths):
        host_chip, host_os = machine_chip(report.machine)
        records = [r for r in report.records if r.backend == "coreml"]
        if host_chip is None and not any(device_chip(r)[0] for r in records):
            if records:
                left_out.append(f"{label}: its machine ({report.machine.get('cpu') or 'unknown CPU'}) matches no chip "
                                "profile: left out")
            continue
        why: Counter[str] = Counter()
        for record in records:
            if record.status != "ok":
                why["did not run"] += 1
                continue
            chip, os_name = device_chip(record)
            if chip is None and "device" in record.details:
                why["measured on a connected device of no known chip"] += 1
                continue
            chip, os_name = (chip, os_name) if chip is not None else (host_chip, host_os)
            if chip is None:
                why["measured on a machine of no known chip"] += 1
                continue
            latency = measured_ms(record)
            program = record.details.get("program") or (
                report.artifacts.get(record.artifact.key, {}).get("program") if record.artifact else None)
            if latency is None:
                why["no measured latency"] += 1
            elif record.placement is None or record.placement.source != "measured":
                why["no measured placement (compute plan)"] += 1
            elif not isinstance(program, dict):
                why["no program analysis in the report"] += 1
            else:
                group = groups.setdefault(f"{chip} {os_name}", Group(chip, chips[chip].name, os_name))
                analysis = ProgramAnalysis.model_validate(program)
                units = record.axes.get("compute_units", "all")
                group.cases.append(Case(label=f"{record.variant_id}", group=group.key, chip=chips[chip],
                                        analysis=analysis, placement=record.placement, measured_ms=latency,
                                        model=record.model, compute_units=units,
                                        precision=record.axes.get("precision", "")))
                tally(group.counts, analysis, record.placement, units)
                if label not in group.sources:
                    group.sources.append(label)
        for reason, n in why.items():
            left_out.append(f"{label}: {n} Core ML record{'s' if n != 1 else ''} left out: {reason}")
    return groups, left_out
