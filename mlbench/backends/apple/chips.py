"""Apple chip profiles for the Core ML latency estimate, and the calibration fit stored beside them.

The profiles live in ``chips.yaml`` (this folder): per chip the peak arithmetic rate of its
Neural Engine, GPU and CPU performance cores, and its memory bandwidth, each group with its
source and a confidence. A pipeline can add its own profiles (a Core ML target's
``chip_profiles``), validated by the same models. The file's ``fit`` section holds the parameters
``benchmarks/calibrate_latency.py`` fitted to published latencies, the rows' residuals and the
error band every estimate carries. Pydantic and YAML only: no coremltools, no torch.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, StringConstraints

from mlbench.config.base import StrictModel

CHIPS_PATH = Path(__file__).with_name("chips.yaml")
CHIP_ID = r"^[a-z0-9][a-z0-9_]*$"
ChipId = Annotated[str, StringConstraints(pattern=CHIP_ID)]
Confidence = Literal["high", "medium", "low"]
Source = Annotated[str, StringConstraints(min_length=1)]
DEVICES = ("neural_engine", "gpu", "cpu")
# Neural Engine generations, oldest first, each named by its first phone chip: A14/M1, A15/M2, A16/M3, A17 Pro/A18/M4,
# A19/M5. Source: the families in chips.yaml's sources (maderix/ANE: M3 shares A16's H15 engine, M4 A17 Pro's H16;
# Apple's coremltools guide: int8-int8 compute from A17 Pro / M4).
GENERATIONS = ("a14", "a15", "a16", "a17pro", "a19")
Generation = Literal["a14", "a15", "a16", "a17pro", "a19"]


class NeuralEngine(StrictModel):
    """The Neural Engine's peak: float16 (Core ML never runs float32 there)."""

    flops_fp16: PositiveFloat = Field(description="Peak float16 FLOP/s (a MAC counts as 2).")
    flops_int8: PositiveFloat | None = Field(
        default=None, description="Peak ops/s with int8 activations (W8A8), only where the chip speeds them up "
        "(A17 Pro, M4 and newer); weight-only int8 computes in float16.")
    generation: Generation | None = Field(
        default=None, description="The Neural Engine generation, named by its first phone chip (GENERATIONS); "
        "calibrated costs carry to an uncalibrated chip from the nearest calibrated generation.")
    source: Source
    confidence: Confidence


class Processor(StrictModel):
    """A GPU's or the CPU performance cores' peak FLOP/s per float precision."""

    flops_fp32: PositiveFloat
    flops_fp16: PositiveFloat
    source: Source
    confidence: Confidence


class Memory(StrictModel):
    bandwidth: PositiveFloat = Field(description="Memory bandwidth in bytes/s, shared by every device.")
    source: Source
    confidence: Confidence


class ChipProfile(StrictModel):
    """One chip: what the latency estimate needs, each figure with where it comes from."""

    name: str = Field(min_length=1, description="Marketing name, e.g. 'A17 Pro'.")
    devices: str = Field(default="", description="Products that carry it, in words.")
    neural_engine: NeuralEngine
    gpu: Processor
    cpu: Processor
    memory: Memory

    @property
    def generation_index(self) -> int | None:
        gen = self.neural_engine.generation
        return GENERATIONS.index(gen) if gen else None

    def peak(self, device: str, dtype: str) -> float:
        """Peak FLOP/s of `device` for an op computing in `dtype` (fp16, fp32, int8)."""
        if device == "neural_engine":
            ne = self.neural_engine
            return ne.flops_int8 if dtype == "int8" and ne.flops_int8 else ne.flops_fp16
        proc = self.gpu if device == "gpu" else self.cpu
        return proc.flops_fp32 if dtype == "fp32" else proc.flops_fp16


class Parameters(StrictModel):
    """The fitted constants of the latency model: a few per device class, none per model."""

    efficiency: dict[str, PositiveFloat] = Field(description="Share of the peak an op reaches, per device.")
    bandwidth_factor: dict[str, PositiveFloat] = Field(
        description="Effective ÷ DRAM bandwidth, per device: above 1 where activations stay in on-chip memory "
        "(the Neural Engine's SRAM), below 1 where a device cannot draw the whole bandwidth.")
    dispatch_ms: dict[str, Annotated[float, Field(ge=0)]] = Field(description="Fixed time per op, per device.")
    switch_overhead_ms: float = Field(ge=0, description="Fixed time per device switch (plus its tensor's transfer).")
    fixed_ms: float = Field(ge=0, description="Fixed time per prediction.")


class FitRow(StrictModel):
    """One published latency and what the fitted model says of it."""

    model: str
    chip: str
    compute_units: str
    precision: str
    published_ms: float
    estimated_ms: float
    ratio: float = Field(description="estimated ÷ published, with every row in the fit")
    loo_ratio: float | None = Field(default=None, description="estimated ÷ published by a fit without this row")


class ChipFit(StrictModel):
    """A calibrated chip's own costs: the fixed cost per prediction, the dispatch per op and the Neural Engine's
    efficiency differ by chip and OS."""

    os: str = Field(description="The OS its rows were measured on.")
    rows: int = Field(ge=1, description="Calibration rows on this chip.")
    fixed_ms: float | None = Field(ge=0, description="Fixed time per prediction on this chip; null where its rows "
                                   "(large models only) do not decide it: then it carries from the nearest "
                                   "calibrated generation, as for a chip without rows.")
    dispatch_ms: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="Fixed time per op, per device the rows decided (others: the shared value).")
    efficiency: dict[str, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict, description="Share of the published peak reached, per device the rows decided (the "
        "Neural Engine's differs by generation; others: the shared value).")


class SplitBand(StrictModel):
    """The leave-one-chip-out error of one kind of row (estimates mostly fixed and per-op cost, or the others): a
    tiny model's estimate on a chip without rows is off by what the harness and chip add per prediction, a larger
    one's by much less, so one pooled band would understate the first and overstate the second."""

    rows: int
    models: int = Field(description="Distinct models among the rows.")
    chips: int = Field(description="Distinct chips among the rows.")
    median_ratio: float
    worst_ratio: float


class Fit(StrictModel):
    """What the calibration fitted, against what, and how far off it is."""

    date: str
    method: str
    data: str = Field(description="Where the published latencies come from.")
    parameters: Parameters
    fitted: list[str] = Field(description="Parameters the rows decided; the others keep their stated priors.")
    priors: dict[str, str] = Field(default_factory=dict, description="Parameter -> where its prior comes from.")
    rows: list[FitRow]
    left_out: list[str] = Field(default_factory=list, description="Rows that could not be rebuilt, and why.")
    median_ratio: float = Field(description="Median of max(r, 1/r) over the rows (r = estimated ÷ published).")
    worst_ratio: float
    loo_median_ratio: float | None = Field(default=None, description="The same, each row predicted without it.")
    loo_worst_ratio: float | None = None
    calibrated: Parameters | None = Field(
        default=None, description="The shared parameters of the per-chip fit, under `per_chip`'s own fixed and "
        "dispatch costs; `parameters` is the pooled fit (one set for every chip) a chip without rows uses.")
    per_chip: dict[str, ChipFit] = Field(
        default_factory=dict, description="Calibrated chips' own fixed and dispatch costs; a chip without rows "
        "uses `parameters` (their priors) and the uncalibrated band.")
    uncalibrated_median_ratio: float | None = Field(
        default=None, description="Median folded ratio of each calibrated chip's rows predicted by a fit that saw "
        "none of that chip's rows: the band of a chip without calibration rows.")
    uncalibrated_worst_ratio: float | None = None
    uncalibrated_chips: list[str] = Field(
        default_factory=list, description="The chips (and OS) whose rows were each predicted without them: the "
        "leave-one-chip-out band's basis.")
    uncalibrated_overhead_bound: SplitBand | None = Field(
        default=None, description="The leave-one-chip-out band of the rows whose estimate was mostly fixed and per-op "
        "cost (latency.OVERHEAD_SHARE or more): the band of such an estimate on a chip without rows.")
    uncalibrated_compute_bound: SplitBand | None = Field(
        default=None, description="The same over the other rows: the band of the other estimates on such a chip.")
    compressed_median_ratio: float | None = Field(
        default=None, description="Median folded leave-one-out ratio over the compressed rows: the band of a "
        "compressed variant.")
    compressed_worst_ratio: float | None = None
    order_evidence: dict[str, list[int]] = Field(
        default_factory=dict, description="Pair of variant kinds ('float16 vs palettized') -> [ordered alike, "
        "pairs]: calibration pairs (same model, chip and source) whose published figures differ by 10% or more, "
        "and how many of them the leave-one-out estimates ordered alike. Reports state an estimated order with it.")


class ChipFile(StrictModel):
    version: Literal[1]
    chips: dict[ChipId, ChipProfile]
    fit: Fit | None = None


@lru_cache(maxsize=2)
def load_chip_file(path: str | Path = CHIPS_PATH) -> ChipFile:
    import yaml

    return ChipFile.model_validate(yaml.safe_load(Path(path).read_text(encoding="utf-8")))


def builtin_chips() -> dict[str, ChipProfile]:
    return dict(load_chip_file().chips)


def calibration() -> Fit | None:
    return load_chip_file().fit


def chip_for_machine(brand: str | None, profiles: dict[str, ChipProfile]) -> str | None:
    """The profile id whose chip this machine has, from its CPU brand ('Apple M1 Pro'), if any."""
    if not brand:
        return None
    name = brand.removeprefix("Apple ").strip().lower()
    for chip_id, profile in profiles.items():
        if profile.name.lower() == name:
            return chip_id
    return None


def estimate_on_problems(estimate_on: list[str], chips: list[str], hint: str = "") -> list[tuple[tuple[str | int, ...], str]]:
    """`estimate_on` entries listed twice or naming no known chip (`hint`: how to add one): one check for
    every target that estimates on Apple chips."""
    from mlbench.config.base import suggest

    problems: list[tuple[tuple[str | int, ...], str]] = []
    for i, chip_id in enumerate(estimate_on):
        if chip_id in estimate_on[:i]:
            problems.append((("estimate_on", i), f"chip '{chip_id}' is listed twice"))
        elif chip_id not in chips:
            problems.append((("estimate_on", i), f"unknown chip '{chip_id}'{suggest(chip_id, chips)} "
                             f"(known: {', '.join(chips)}{hint})"))
    return problems
