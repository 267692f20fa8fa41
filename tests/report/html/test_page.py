"""The HTML report: self-contained, charts drawn to scale, and rendered by a real headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest

from mlbench.plugins.registry import devices
from mlbench.records import Metric
from mlbench.report.html.page import LATENCY_COLOR, PLOT_W, TREND_COLOR, render_html
from tests.compare.test_comparison import rec, run_of


def sample_report():
    est = lambda v, unit="ratio": Metric.estimated(v, unit)  # noqa: E731
    records = [
        rec("m/torch/cpu", [1.0, 1.1, 1.2, 1.3, 2.0]),
        rec("m/torch/fast", [0.5, 0.55, 0.6, 0.65, 0.7]),
        rec("m/coreml/all", latency__median=est(0.4, "ms"), placement__neural_engine=est(0.95),
            placement__gpu=est(0.0), placement__cpu=est(0.05), placement__switches=Metric.estimated(2, "count")),
        rec("m/coreml/cpu_only", placement__neural_engine=Metric.measured(0.0, "ratio"),
            placement__cpu=Metric.measured(1.0, "ratio")),
        rec("m/torch/broken", status="failed"),
    ]
    records[3].metrics["latency.median"] = Metric.absent("ms", "Core ML runs only on macOS")
    return run_of(records, "thisrun0001")


class Elements(HTMLParser):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.found: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))

    def all(self, tag: str, cls: str | None = None) -> list[dict]:
        return [a for t, a in self.found if t == tag and (cls is None or cls in a.get("class", "").split())]


def test_self_contained_no_network_no_script():
    text = render_html(sample_report())
    assert text.startswith("<!DOCTYPE html>")
    elements = Elements(text)
    assert not elements.all("script") and not elements.all("link") and not elements.all("img")
    for needle in ("src=", "href=", "url(http", "@import", "http://", "https://"):
        assert needle not in text


def test_latency_bars_are_to_scale_and_absent_figures_say_why():
    text = render_html(sample_report())
    bars = {re.search(r"<title>([^:]+):", m.group(0)).group(1): float(m.group(1))
            for m in re.finditer(r'<rect class="bar median \w+" x="\d+" y="[\d.]+" width="([\d.]+)"[^>]*><title>[^<]*', text)}
    assert set(bars) == {"m/torch/cpu", "m/torch/fast", "m/coreml/all"}
    assert bars["m/torch/cpu"] / bars["m/torch/fast"] == pytest.approx(1.2 / 0.6, rel=0.01)
    assert 'fill="url(#est-latency)"' in text and "≈0.400 ms" in text  # the estimate is hatched and marked
    assert "not timed: Core ML runs only on macOS" in text
    assert "≈ANE 95% CPU 5%, 2 switches" in text and "ANE 0%" not in text
    assert "failed: measure: boom" in text


def test_placement_segments_are_to_scale():
    elements = Elements(render_html(sample_report()))
    ne = elements.all("rect", "neural_engine")
    assert len(ne) == 1 and float(ne[0]["width"]) == pytest.approx(0.95 * PLOT_W, abs=0.1)
    cpu = elements.all("rect", "cpu")
    assert sorted(float(r["width"]) for r in cpu) == pytest.approx([0.05 * PLOT_W, PLOT_W], abs=0.1)
    assert float(cpu[0]["x"]) == pytest.approx(float(ne[0]["x"]) + 0.95 * PLOT_W, abs=0.1)  # right after the ANE
    assert not elements.all("rect", "unknown")


def test_trends_only_where_history_has_earlier_runs():
    report = sample_report()
    assert "No earlier runs of this pipeline in the history yet." in render_html(report)
    points = lambda *vs: [SimpleNamespace(run_id=f"r{i}", created=f"2026-01-0{i + 1}", value=v, source="measured")  # noqa: E731
                          for i, v in enumerate(vs)]
    text = render_html(report, trends={"m/torch/cpu": points(1.0, 1.1), "m/torch/fast": points(None)})
    charts = Elements(text).all("svg", "trend")
    assert len(charts) == 1 and charts[0]["aria-label"] == "Latency trend of m/torch/cpu"
    line = Elements(text).all("polyline", "trend-line")[0]
    assert len(line["points"].split()) == 3  # two earlier runs plus this one


def _chromium() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def screenshot(html_path, png_path, profile, width=1200, height=1400) -> None:
    browser = _chromium()
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                    "--hide-scrollbars", f"--window-size={width},{height}", f"--screenshot={png_path}",
                    html_path.as_uri()], check=True, capture_output=True, timeout=120)


def _count(image, hex_color: str, tolerance: int = 12) -> int:
    target = tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    data = image.tobytes()
    return sum(1 for i in range(0, len(data), 3)
               if all(abs(data[i + k] - target[k]) <= tolerance for k in range(3)))


@pytest.mark.skipif(_chromium() is None, reason="needs a Chromium (apt-get install chromium)")
@pytest.mark.slow
def test_chromium_draws_every_chart(tmp_path):
    image_module = pytest.importorskip("PIL.Image")
    points = [SimpleNamespace(run_id=f"r{i}", created=f"2026-01-0{i + 1}", value=v, source="measured")
              for i, v in enumerate([1.0, 1.3, 1.1])]
    html_path = tmp_path / "report.html"
    html_path.write_text(render_html(sample_report(), trends={"m/torch/cpu": points}), encoding="utf-8")
    png = tmp_path / "report.png"
    screenshot(html_path, png, tmp_path / "profile", height=2400)
    image = image_module.open(png).convert("RGB")
    assert image.size == (1200, 2400)
    # Every chart left its colour on the page: latency bars (85% opaque), each device, the trend line.
    blended = "#" + "".join(f"{round(int(LATENCY_COLOR[i:i + 2], 16) * 0.85 + 255 * 0.15):02x}" for i in (1, 3, 5))
    assert _count(image, blended) > 2000
    for device in devices().values():
        name, color = device.label, device.color
        if name != "GPU":  # the Neural Engine's share is estimated here: hatched, so fewer pixels of its colour
            assert _count(image, color) > 300, name
    assert _count(image, TREND_COLOR) > 100


@pytest.mark.torch
@pytest.mark.skipif(_chromium() is None, reason="needs a Chromium (apt-get install chromium)")
@pytest.mark.slow
def test_a_run_writes_the_html_report_with_trends(write_pipeline, tiny_pipeline_text, tmp_path):
    from mlbench.cli.main import main

    text = tiny_pipeline_text.replace("report: {dir: out}", "report: {dir: out, formats: [html]}")
    path = write_pipeline(text + "history: {path: history.sqlite}\n")
    assert main(["run", "-q", str(path)]) == 0
    assert "No earlier runs" in (tmp_path / "out" / "report.html").read_text()
    assert main(["run", "-q", str(path)]) == 0
    html = (tmp_path / "out" / "report.html").read_text()
    assert not (tmp_path / "out" / "report.json").exists()
    assert Elements(html).all("svg", "trend") and "2 runs, median ms" in html
    result = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}",
                             "--dump-dom", (tmp_path / "out" / "report.html").as_uri()],
                            capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.count('<svg class="chart latency') == 1 and 'class="trend-line"' in result.stdout
