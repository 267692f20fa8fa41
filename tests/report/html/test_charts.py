"""The HTML charts tell the truth at a glance: each model's latency on its own scale, estimates hatched as
the legend says, trends against dates on an axis from zero. Checked in the SVG and, where a browser
draws it, in headless Chromium's pixels."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from mlbench.plugins.registry import devices
from mlbench.records import Metric
from mlbench.report.html.charts import LATENCY_COLOR, PLOT_W, TREND_COLOR, hatch_defs
from mlbench.report.html.latency import latency_chart
from mlbench.report.html.page import STYLE, render_html
from mlbench.report.html.trend import PAD_B, PAD_L, PAD_T, H, trend_chart
from tests.compare.test_comparison import rec, run_of
from tests.report.html.test_page import Elements, _chromium, sample_report, screenshot


def two_speeds():
    """A 0.02 ms model beside a 30 ms one, and an estimated Core ML latency."""
    records = [rec("tiny/torch/cpu", [0.018, 0.02, 0.021, 0.022, 0.03]),
               rec("big/torch/cpu", [28.0, 30.0, 31.0, 33.0, 40.0]),
               rec("big/coreml/all", latency__median=Metric.estimated(12.0, "ms"))]
    return run_of(records, "speeds0001")


def bars(html: str) -> dict[str, float]:
    return {m.group(2): float(m.group(1)) for m in re.finditer(
        r'<rect class="bar median \w+" x="[\d.]+" y="[\d.]+" width="([\d.]+)"[^>]*><title>([^:]+):', html)}


def test_each_model_and_deployment_target_has_its_own_latency_scale():
    html = render_html(two_speeds())
    assert len(Elements(html).all("svg", "latency")) == 3  # tiny; big on this CPU; big's Core ML estimate
    widths = bars(html)
    assert widths["tiny/torch/cpu"] > 0.4 * PLOT_W  # not a 1-px sliver beside the 30 ms model
    assert widths["big/torch/cpu"] > 0.4 * PLOT_W
    assert widths["big/coreml/all"] > 0.4 * PLOT_W  # an Apple estimate is never drawn against an x86 measurement
    assert "Each model and deployment target has its own chart and scale" in html
    assert ">0.04 ms</text>" in html and ">40 ms</text>" in html  # each chart's axis end
    assert html.index("Apple devices") < html.index("big/coreml/all") < html.index("server or desktop CPU")


def test_only_per_chip_estimates_are_drawn_as_chips_not_load_times_or_prefill():
    """A cold and a warm load (measured, ms) and a generation's prefill estimate are not one call's latency on a
    chip: the latency chart and its legend leave them out (they once showed as '≈ cold (estimated for that chip)')."""
    records = [rec("m/onnxruntime/cpu", [2.0, 2.1, 2.2], load_time__cold=110.0, load_time__warm=70.0),
               rec("m/coreml/all", latency__estimated__a17pro=Metric.estimated(0.7, "ms"),
                   latency__estimated__prefill__a17pro=Metric.estimated(9.0, "ms"))]
    html = render_html(run_of(records, "loads0001"))
    assert "a17pro (estimated for that chip)" in html
    for other in ("cold", "warm", "prefill.a17pro"):
        assert f"{other} (estimated for that chip)" not in html
    assert "ms cold</text>" not in html and "ms warm</text>" not in html

def test_estimates_are_hatched_as_the_legend_says_and_every_pattern_is_defined_once():
    html = render_html(sample_report())
    used = set(re.findall(r'fill="url\(#([\w-]+)\)"', html))
    defined = re.findall(r'<pattern id="([\w-]+)"', html)
    assert len(defined) == len(set(defined)) and used <= set(defined)
    assert "est-latency" in used and "est-neural_engine" in used and "est-cpu" in used
    for rect in Elements(html).all("rect"):
        classes = rect.get("class", "").split()
        if "estimated" in classes:
            assert rect["fill"].startswith("url(#est-"), rect
        elif "measured" in classes:
            assert not rect["fill"].startswith("url("), rect
    assert "estimated median (≈)" in html and "hatched: estimated (≈)" in html


def points(values, start=1):
    return [SimpleNamespace(run_id=f"r{i}", created=f"2026-01-{i + start:02d}T03:17:00+00:00", value=v,
                            source="measured") for i, v in enumerate(values)]


def test_a_trend_starts_at_zero_has_dates_and_keeps_labels_off_the_points():
    svg = trend_chart("m/torch/cpu", points([10.0, 10.05, 9.98, 10.02]), "r3")
    ticks = re.findall(r'class="muted tick" x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]+)<', svg)
    assert [t[2] for t in ticks] == ["0 ms", "10 ms", "20 ms"]
    dates = re.findall(r'class="muted date"[^>]*>([^<]+)<', svg)
    assert dates == ["2026-01-01", "2026-01-04"]
    ys = [float(y) for y in re.findall(r'<circle cx="[\d.]+" cy="([\d.]+)"', svg)]
    plot_h = H - PAD_T - PAD_B
    assert max(ys) - min(ys) < 0.02 * plot_h  # a 0.7% wobble looks like one
    for x, _, _ in ticks:
        assert float(x) < PAD_L  # tick labels left of the plot
    cxs = [float(x) for x in re.findall(r'<circle cx="([\d.]+)"', svg)]
    assert min(cxs) >= PAD_L
    for match in re.finditer(r'<text class="([^"]+)" x="[\d.]+" y="([\d.]+)"', svg):
        if "tick" not in match.group(1):
            y = float(match.group(2))
            assert y < PAD_T - 4 or y > PAD_T + plot_h + 8, match.group(0)  # titles above, dates below
    assert ">+0.2%</text>" in svg


def test_trend_points_follow_their_dates_not_the_order_given():
    pts = points([1.0, 2.0, 3.0])
    pts[0], pts[2] = pts[2], pts[0]  # given newest first
    svg = trend_chart("m", pts, "r2")
    line = re.search(r'points="([^"]+)"', svg).group(1).split()
    xs = [float(p.split(",")[0]) for p in line]
    assert xs == sorted(xs)
    spaced = trend_chart("m", [*points([1.0, 1.0]), *points([1.0], start=10)], "r0")
    gaps = [float(p.split(",")[0]) for p in re.search(r'points="([^"]+)"', spaced).group(1).split()]
    assert gaps[1] - gaps[0] < (gaps[2] - gaps[1]) / 4  # one day apart, then eight


def _page(svg: str) -> str:
    return (f"<!DOCTYPE html><html><head><style>{STYLE} body {{ margin: 0; padding: 0; }}</style></head>"
            f"<body>{hatch_defs()}{svg}</body></html>")


def _colors_in(image, box) -> dict[tuple[int, int, int], int]:
    found: dict[tuple[int, int, int], int] = {}
    for x in range(box[0], box[2]):
        for y in range(box[1], box[3]):
            pixel = image.getpixel((x, y))
            found[pixel] = found.get(pixel, 0) + 1
    return found


def _rgb(color: str) -> tuple[int, int, int]:
    return tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))


def _near(a, b, tolerance=40) -> bool:
    return all(abs(x - y) <= tolerance for x, y in zip(a, b))


@pytest.mark.skipif(_chromium() is None, reason="needs a Chromium (apt-get install chromium)")
def test_chromium_draws_estimates_hatched_and_measurements_solid(tmp_path):
    image_module = pytest.importorskip("PIL.Image")
    records = [rec("m/torch/cpu", [10.0] * 5), rec("m/coreml/all", latency__median=Metric.estimated(10.0, "ms"))]
    svg = latency_chart(records, label_w=200)
    page = tmp_path / "chart.html"
    page.write_text(_page(svg), encoding="utf-8")
    png = tmp_path / "chart.png"
    screenshot(page, png, tmp_path / "profile", width=1000, height=200)
    image = image_module.open(png).convert("RGB")
    rects = [r for r in Elements(svg).all("rect") if "median" in r.get("class", "")]
    boxes = [(int(float(r["x"])) + 3, int(float(r["y"])) + 3, int(float(r["x"]) + float(r["width"])) - 3,
              int(float(r["y"]) + float(r["height"])) - 3) for r in rects]
    measured, estimated = (_colors_in(image, b) for b in boxes)
    assert len(measured) <= 3  # one solid colour (plus anti-aliasing at most)
    (solid,) = [c for c, n in measured.items() if n == max(measured.values())]
    assert _near(solid, _rgb(LATENCY_COLOR), 45)  # the latency colour at 85% opacity
    (tint,) = [c for c, n in estimated.items() if n == max(estimated.values())]
    assert sum(tint) > 3 * 200  # the light tint between the stripes
    middle = (sum(solid) + sum(tint)) / 2
    stripes = sum(n for c, n in estimated.items() if sum(c) < middle)  # nearer the bar's colour than the tint
    gaps = sum(n for c, n in estimated.items() if sum(c) >= middle)
    total = sum(estimated.values())
    assert stripes > 0.2 * total and gaps > 0.2 * total  # hatched: the colour and the light between, both


@pytest.mark.skipif(_chromium() is None, reason="needs a Chromium (apt-get install chromium)")
def test_chromium_draws_a_small_wobble_flat(tmp_path):
    image_module = pytest.importorskip("PIL.Image")
    page = tmp_path / "trend.html"
    page.write_text(_page(trend_chart("m/torch/cpu", points([10.0, 10.05, 9.98, 10.02, 10.01]), "r4")), encoding="utf-8")
    png = tmp_path / "trend.png"
    screenshot(page, png, tmp_path / "profile", width=400, height=200)
    image = image_module.open(png).convert("RGB")
    rows = [y for y in range(PAD_T, H - PAD_B) if any(_near(image.getpixel((x, y)), _rgb(TREND_COLOR), 30)
                                                     for x in range(PAD_L + 8, 330))]
    assert rows and max(rows) - min(rows) <= 12  # the line and its dots: a band of a few pixels, not a cliff
    assert min(rows) > PAD_T + (H - PAD_T - PAD_B) * 0.3  # around 10 on a 0–20 ms axis, not at the top
    assert len(set(rows)) > 0


def test_devices_each_have_a_hatch():
    defs = hatch_defs()
    for device in devices().values():
        assert f'id="est-{device.name}"' in defs and device.color in defs
