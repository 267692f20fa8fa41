"""What a run produces: records of variants with labelled metrics. Pure data, no presentation.

Every figure is a `Metric` that says where it came from: `measured` (a runtime on this machine
said so), `emulated` (mlbench's interpreter ran the saved program), `reference` (a vendor's reference
runtime ran the saved program on this machine's CPU: its numerics, not the device's) or `estimated`
(mlbench's static rules or cost model; an estimate may carry its error band). A figure that could not be had is
kept with `value: null` and the reason, never as zero.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Source = Literal["measured", "emulated", "reference", "estimated"]
Status = Literal["ok", "failed", "skipped"]


class Band(BaseModel):
    """How far an estimate of this kind can be off: ratios of estimated to measured figures, each
    folded to at least 1 (×1.5 means 1.5 times too high or too low)."""

    model_config = ConfigDict(extra="forbid")

    median_ratio: float = Field(ge=1, description="Median of the folded ratios.")
    worst_ratio: float = Field(ge=1, description="The largest folded ratio.")
    basis: str = Field(description="What the ratios were computed on, in words.")


class Metric(BaseModel):
    """One figure with its unit and its origin."""

    model_config = ConfigDict(extra="forbid")

    value: float | None = Field(description="The figure, or null when it could not be had.")
    unit: str = Field(description="Unit of value: ms, s, bytes, ratio, count, ...")
    source: Source | None = Field(description="measured, emulated, reference or estimated; null when value is null.")
    reason: str | None = Field(default=None, description="Why value is null.")
    band: Band | None = Field(default=None, exclude_if=lambda v: v is None,
                              description="For estimates: how far such estimates were from measurements "
                              "(calibration), where known.")
    measured_as: str | None = Field(default=None, exclude_if=lambda v: v is None,
                                    description="For an estimate of what this machine also measured: the "
                                    "measured metric's name (reports show their ratio).")

    @model_validator(mode="after")
    def _value_or_reason(self) -> Metric:
        if self.value is None and (self.source is not None or not self.reason):
            raise ValueError("an absent metric has no source and must say why")
        if self.value is not None and self.source is None:
            raise ValueError("a metric with a value must say whether it was measured, emulated, reference or estimated")
        return self

    @classmethod
    def measured(cls, value: float, unit: str) -> Metric:
        return cls(value=value, unit=unit, source="measured")

    @classmethod
    def emulated(cls, value: float, unit: str) -> Metric:
        return cls(value=value, unit=unit, source="emulated")

    @classmethod
    def estimated(cls, value: float, unit: str) -> Metric:
        return cls(value=value, unit=unit, source="estimated")

    @classmethod
    def absent(cls, unit: str, reason: str) -> Metric:
        return cls(value=None, unit=unit, source=None, reason=reason)


class Latency(BaseModel):
    """Timing of repeated calls: summary statistics beside the raw samples they came from."""

    model_config = ConfigDict(extra="forbid")

    source: Source = "measured"
    unit: Literal["ms"] = "ms"
    samples: list[float] = Field(description="Every timed call, in call order (warmup excluded).")
    warmup: int = Field(description="Calls made and thrown away before timing.")
    median: float
    best: float
    p90: float
    mean: float
    stdev: float
    cv: float = Field(description="Coefficient of variation: stdev / mean.")
    threads: int | None = Field(description="Intra-op threads the runtime used, where known.")
    total_s: float = Field(description="Wall time of the timed calls.")
    stopped_by: Literal["repeats", "min_time", "max_repeats"] = Field(
        description="Which condition ended the loop last (both repeats and min_time_s must be met)."
    )


class OutputError(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    max_abs: float
    max_rel: float = Field(description="max |backend - reference| / max(max |reference|, 1).")
    shape: list[int]


class Verification(BaseModel):
    """How far a variant's outputs are from the eager float32 reference, over every output."""

    model_config = ConfigDict(extra="forbid")

    source: Source = "measured"
    reference: str = Field(description="What the outputs were compared with.")
    max_abs: float
    max_rel: float
    tolerance: float = Field(description="Limit on max_rel for this precision, from the pipeline.")
    passed: bool
    outputs: list[OutputError]
    note: str | None = Field(default=None, description="Why the comparison may say little, e.g. outputs all ≈ 0.")
    samples: int = Field(default=1, description="Seeded input sets compared; max_abs/max_rel are the worst of them.")
    snr_db: float | None = Field(
        default=None, description="Signal-to-noise ratio of the outputs in dB, the worst output over every sample "
        "(10·log10 of Σref² / Σ(ref − actual)²); null when the outputs match exactly.")
    top1_agreement: float | None = Field(
        default=None, description="For outputs that look like class scores (2-D, last dimension > 1): the share "
        "of rows whose arg-max matches eager's, the worst such output over every sample.")
    method: str | None = Field(default=None, description="How the outputs were had, in plain words (e.g. the "
                               "interpreter's precision rule for emulated verification).")


Device = str
"""Where an operation ran: `neural_engine`, `gpu`, `cpu` (Core ML's devices; ONNX Runtime's CPU and
CUDA providers map to `cpu` and `gpu`), or another provider's own lower-case name (e.g. `coreml`)."""


class OpPlacement(BaseModel):
    """One compute operation and where it ran (or would run)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    op_type: str = Field(description="Operation type with any opset prefix removed (ios17.conv -> conv).")
    device: Device | None = Field(description="Where it ran; null when unknown.")
    supported: list[Device] | None = Field(default=None, description="Devices that support it, where known.")
    cost: float | None = Field(default=None, description="Share of the model's work in [0, 1], where known.")
    time_ms: float | None = Field(default=None, description="Measured time of this operation per run, where known.")
    provider: str | None = Field(default=None, description="The runtime's own name for the device, where it has one.")
    reason: str | None = Field(default=None, description="Why it is not on the preferred device.")
    rule: str | None = Field(default=None, description="For estimates: the id of the rule that decided.")


class Placement(BaseModel):
    """Where a variant's operations run, summarised the same way for every backend.

    Constants (and ONNX initializers) are data, not computation: counted apart and kept out of
    every fraction. `switches` counts device changes along the program order: each one is a
    transfer the runtime pays for.
    """

    model_config = ConfigDict(extra="forbid")

    source: Source
    method: str = Field(description="What produced it, e.g. 'MLComputePlan', 'onnxruntime profiling', 'mlbench rules'.")
    preferred: Device | None = Field(default=None, description="The device the variant asked for, if any.")
    compute_ops: int
    constants: int
    by_count: dict[Device, float] = Field(description="Share of compute operations per device.")
    by_cost: dict[Device, float] | None = Field(
        default=None,
        description="Share of cost per device (Core ML's estimated cost, measured time, or a roofline estimate).",
    )
    cost_basis: Literal["estimated_cost", "time", "macs", "roofline"] | None = Field(
        default=None,
        description="What by_cost weighs: Core ML's estimated cost, measured time, MACs (older estimates), or "
        "roofline: max(FLOPs / peak, bytes / bandwidth) of each op on its device, from mlbench's cost model "
        "and a reference chip (estimates).",
    )
    switches: int = Field(description="Device changes along the program order.")
    unknown: int = Field(default=0, description="Compute operations the runtime named no device for (e.g. casts "
                         "at the boundary): counted apart, never as off the preferred device.")
    rules: dict[str, int] | None = Field(
        default=None, description="For estimates: the rules that decided, with the number of operations each decided.")
    confidence: Literal["high", "medium", "low"] | None = Field(
        default=None, description="For estimates: the lowest confidence among the rules that moved an operation "
        "off the preferred device (or decided the whole program).")
    note: str | None = Field(default=None, description="Plain-words explanation, e.g. why nothing reached the Neural Engine.")
    ops: list[OpPlacement]


class ArtifactInfo(BaseModel):
    """The exported artifact a variant was measured from (absent for eager variants)."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="Content hash of everything that shapes the artifact.")
    cache_hit: bool
    export_seconds: float = Field(description="Time the export took when it was built.")
    path: str
    size_bytes: int
    export_path: str | None = Field(default=None, description="Which exporter made it.")


class RunRecord(BaseModel):
    """One variant's outcome. `failed` and `skipped` records keep their message."""

    model_config = ConfigDict(extra="forbid")

    variant_id: str
    model: str
    backend: str
    axes: dict[str, str]
    artifact_id: str
    status: Status
    error: str | None = None
    metrics: dict[str, Metric] = Field(default_factory=dict)
    latency: Latency | None = None
    verify: Verification | None = None
    placement: Placement | None = None
    artifact: ArtifactInfo | None = None
    details: dict[str, Any] = Field(
        default_factory=dict, description="Backend-specific data (program analysis, placement, ...)."
    )
    started: str = Field(description="ISO-8601 UTC time the variant started.")
    seconds: float = Field(description="Wall time spent on this variant.")


class PipelineInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    path: str
    sha256: str = Field(description="sha256 of the pipeline file's bytes.")


class RunReport(BaseModel):
    """A whole run: what ran, where, with which settings, and every record."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1, 2] = Field(
        default=2, description="2 added the `emulated` source and multi-sample verification; 1 is still read.")
    mlbench_version: str
    run_id: str
    created: str = Field(description="ISO-8601 UTC start of the run.")
    finished: str | None = Field(description="ISO-8601 UTC end; null for a partial (interrupted) report.")
    pipeline: PipelineInfo
    machine: dict[str, Any]
    settings: dict[str, Any] = Field(description="Latency and verify settings the run used.")
    records: list[RunRecord]
    artifacts: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per artifact key, what is known of the artifact itself (program analysis, export "
        "details): kept once, however many variants measure it.",
    )
    stage_seconds: dict[str, float] = Field(
        default_factory=dict, description="Wall time the run spent building models (load), exporting or "
        "fetching artifacts (export) and measuring (measure)."
    )
    summary: dict[Status, int] = Field(description="Number of records per status.")
