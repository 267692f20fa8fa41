"""What compare and calibrate read: a FIFO is refused at once (it once hung them for ever), a 5,000-digit number
is one line (it was a traceback and exit 1, compare's "regression"), `true` is not a latency of 1."""

from __future__ import annotations

import json
import os
import signal

import pytest

from mlbench.cli.main import main
from tests.compare.test_input import _report_file


@pytest.fixture
def alarm():
    """The test fails instead of hanging when a read waits."""
    def ring(signum, frame):
        raise TimeoutError("the read waited")
    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_a_fifo_given_as_a_report_is_refused_without_waiting(tmp_path, capsys, alarm):
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    good = _report_file(tmp_path, "good")
    assert main(["compare", str(fifo), str(good)]) == 2
    assert capsys.readouterr().err == f"{fifo}: not a regular file; give a report.json\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_calibrate_refuses_a_fifo_without_waiting(tmp_path, alarm):
    from mlbench.backends.apple.calibration.measured import read_report
    from mlbench.errors import UserError

    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="not a regular file"):
        read_report(fifo)


def test_a_number_of_5000_digits_is_one_line_exit_2(tmp_path, capsys):
    path = _report_file(tmp_path, "big")
    text = path.read_text().replace('"summary": {"ok": 2', '"summary": {"ok": ' + "9" * 5000, 1)
    assert text != path.read_text()
    path.write_text(text)
    assert main(["compare", str(path), str(_report_file(tmp_path, "good"))]) == 2
    assert capsys.readouterr().err == (f"{path}: not an mlbench report: a number of 5,000 digits (no figure has "
                                       "more than 400)\n")


@pytest.mark.parametrize("value", [True, "12.5"])
def test_a_latency_that_is_not_a_number_is_refused(tmp_path, capsys, value):
    def edit(data):
        data["records"][0]["latency"]["median"] = value
    path = _report_file(tmp_path, "typed", edit)
    assert main(["compare", str(path), str(_report_file(tmp_path, "good"))]) == 2
    assert capsys.readouterr().err == f"{path}: not an mlbench report: records[0].latency.median: Input should be a valid number\n"


def test_a_report_too_big_is_refused_before_it_is_read(tmp_path, monkeypatch, capsys):
    from mlbench.compare import report_file

    monkeypatch.setattr(report_file, "MAX_REPORT_BYTES", 100)
    monkeypatch.setattr(report_file.read_regular, "__defaults__", (100,))
    path = _report_file(tmp_path, "big")
    assert main(["compare", str(path), str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"{path}: is {path.stat().st_size:,} bytes, more than a report can be (100)")


def test_a_report_still_reads(tmp_path):
    from mlbench.compare.report_file import read_report_file

    path = _report_file(tmp_path, "ok")
    assert read_report_file(path).run_id == json.loads(path.read_text())["run_id"]
