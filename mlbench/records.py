"""What a run produces: records of variants with labelled metrics. Pure data, no presentation.

Every figure is a `Metric` that says where it came from: `measured` (a runtime on this machine
said so), `emulated` (mlbench's interpreter ran the saved program), `reference` (a vendor's reference
runtime ran the saved program on this machine's CPU: its numerics, not the device's) or `estimated`
(mlbench's static rules or cost model; an estimate may carry its error band). A figure that could not be had is
kept with `value: null` and the reason, never as zero.

JSON holds no inf or nan: such a figure is data, not a crash. A `Metric` that is not finite is absent
with the reason (`"inf: an output holds inf or nan where eager float32's is finite"`); a verification's
figures are written null with the reason in its `not_finite` and read back as the same inf or nan.
"""

from __future__ import annotations

import math
import numbers
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    model_serializer,
    model_validator,
)

from mlbench.stability import Stability

Source = Literal["measured", "emulated", "reference", "estimated"]
Status = Literal["ok", "failed", "skipped"]

NOT_FINITE = "not a finite number"
"""Why an inf or nan figure is absent, when whoever made it said no more."""


def not_finite_reason(value: float, why: str = NOT_FINITE) -> str:
    """`inf: why`, `-inf: why` or `nan: why`: the reason an absent figure gives for a value JSON cannot hold."""
    kind = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return f"{kind}: {why}"


def _is_not_finite(value: Any) -> bool:
    """inf or nan, as a float or a numpy scalar (numbers.Real covers both)."""
    return isinstance(value, numbers.Real) and not isinstance(value, int) and not math.isfinite(value)


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
    band: Band | None = Field(default=None,
                              description="For estimates: how far such estimates were from measurements "
                              "(calibration), where known.")
    measured_as: str | None = Field(default=None,
                                    description="For an estimate of what this machine also measured: the "
                                    "measured metric's name (reports show their ratio).")
    samples: list[float] | None = Field(default=None,
                                        description="The raw samples value is the median of, where the figure has "
                                        "its own (a generation's timed prefills and decode steps); compare's noise "
                                        "guard reads them.")
    stability: Stability | None = Field(default=None,
                                        description="For a timed figure: how far it can be trusted (dispersion, "
                                        "samples, the machine's load while it was taken); null in records written "
                                        "before figures were graded, and for figures that are not timed.")
    spread: float | None = Field(default=None,
                                 description="For a figure measured several times in the run (memory): the largest "
                                 "minus the smallest measurement (memory.rounds), in the figure's unit; compare "
                                 "widens its noise floor to both runs' spreads, summed.")

    @model_serializer(mode="wrap")
    def _leave_out_unset_extras(self, handler: SerializerFunctionWrapHandler):  # no return annotation: see
        # NotFiniteAsAbsent. Written out by hand rather than with Field(exclude_if=...), which needs pydantic 2.12
        data = handler(self)
        if isinstance(data, dict):
            for name in ("band", "measured_as", "samples", "stability", "spread"):
                if data.get(name, 0) is None:
                    del data[name]
        return data

    @model_validator(mode="before")
    @classmethod
    def _not_finite_is_absent(cls, data: Any) -> Any:
        """inf or nan is no figure: absent, with the kind of value and the reason given (or NOT_FINITE)."""
        if isinstance(data, dict) and _is_not_finite(data.get("value")):
            why = data.get("reason") or NOT_FINITE
            data = {**data, "value": None, "source": None, "reason": not_finite_reason(data["value"], why)}
        return data

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

    @classmethod
    def figure(cls, value: float, unit: str, source: Source, *, why_not_finite: str) -> Metric:
        """`value` from `source`; absent with `why_not_finite` when it is inf or nan."""
        if _is_not_finite(value):
            return cls.absent(unit, not_finite_reason(value, why_not_finite))
        return cls(value=value, unit=unit, source=source)


Figure = Annotated[float, WithJsonSchema({"anyOf": [{"type": "number"}, {"type": "null"}]}, mode="serialization")]
"""A float that may be inf or nan: null in JSON, its reason in the model's `not_finite`."""


class NotFiniteAsAbsent(BaseModel):
    """Writes each inf or nan float field as null with `not_finite[field] = "inf: why"`, and reads such a
    null back as the inf or nan it was, so a record round-trips through JSON unchanged."""

    omit_when_none: ClassVar[tuple[str, ...]] = ()
    """Optional fields left out of the JSON while unset (pydantic 2.12's Field(exclude_if=...), by hand)."""

    def _why_not_finite(self) -> str:
        return NOT_FINITE

    @model_serializer(mode="wrap")
    def _write_not_finite(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo):  # no return
        # annotation: pydantic keeps the model's own schema (with `-> Any` the schema would say nothing)
        data = handler(self)
        if not isinstance(data, dict):
            return data
        reasons = dict(data.get("not_finite") or {})
        for name, value in data.items():
            if _is_not_finite(value):
                data[name] = None
                reasons.setdefault(name, not_finite_reason(value, self._why_not_finite()))
        if reasons:
            data["not_finite"] = reasons
        else:
            data.pop("not_finite", None)  # only the figures that were inf or nan are listed
        for name in self.omit_when_none:
            if data.get(name, 0) is None:
                del data[name]
        return data

    @model_validator(mode="before")
    @classmethod
    def _read_not_finite(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.get("not_finite"):
            return data
        data = dict(data)
        for name, reason in data["not_finite"].items():
            if data.get(name) is None and isinstance(reason, str):
                try:
                    data[name] = float(reason.split(":", 1)[0])
                except ValueError:
                    pass  # not a kind of value: the field's own validation says what is wrong
        return data


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
    stability: Stability | None = Field(default=None, description="How far the figures can be trusted, graded "
                                        "from the samples and the machine's load while they were taken (docs/"
                                        "running.md, Stability); null in records written before.")

    @model_serializer(mode="wrap")
    def _leave_out_no_stability(self, handler: SerializerFunctionWrapHandler):  # no return annotation: as Metric's
        data = handler(self)
        if isinstance(data, dict) and data.get("stability", 0) is None:
            del data["stability"]  # records that never had one keep their JSON as it was
        return data


def _not_finite_field() -> Any:
    return Field(default_factory=dict,  # left out of the JSON when empty (NotFiniteAsAbsent)
                 description="The figures that were inf or nan (null here), each with the reason.")


OUTPUT_NOT_FINITE = "an output holds inf or nan where eager float32's is finite"


class OutputError(NotFiniteAsAbsent):
    model_config = ConfigDict(extra="forbid")

    name: str
    max_abs: Figure
    max_rel: Figure = Field(description="max |backend - reference| / max(max |reference|, 1).")
    shape: list[int]
    not_finite: dict[str, str] = _not_finite_field()

    def _why_not_finite(self) -> str:
        return OUTPUT_NOT_FINITE


class Verification(NotFiniteAsAbsent):
    """How far a variant's outputs are from the eager float32 reference, over every output."""

    model_config = ConfigDict(extra="forbid")

    source: Source = "measured"
    reference: str = Field(description="What the outputs were compared with.")
    max_abs: Figure
    max_rel: Figure
    tolerance: float = Field(description="Limit on max_rel for this precision, from the pipeline.")
    min_snr_db: float | None = Field(
        default=None, description="Least SNR in dB each output with any signal needed (verify.min_snr_db for this "
        "precision or recipe); null in records written before the SNR was judged.")
    passed: bool
    failures: list[str] = Field(
        default_factory=list, description="Why it failed, one line per check it broke (max_rel over the tolerance, "
        "an output's SNR under the floor, a class decision moved); empty when it passed.")
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
    overflow: str | None = Field(default=None, description="Where values passed "
                                 "float16's range (65504): the output that does in eager float32, and the op "
                                 "where it first happens in the emulated program, when known.")
    omit_when_none: ClassVar[tuple[str, ...]] = ("overflow",)
    not_finite: dict[str, str] = _not_finite_field()

    @property
    def why_not_finite(self) -> str:
        """Why a figure of this verification is inf or nan: the overflow when one was found."""
        if math.isfinite(self.max_abs):
            return NOT_FINITE
        return self.overflow or OUTPUT_NOT_FINITE

    def _why_not_finite(self) -> str:
        return self.why_not_finite

    def why_failed(self) -> str:
        """The failures in one line, saying where the figures came from when they were not measured."""
        text = "; ".join(self.failures) or f"max_rel {self.max_rel:.3g} exceeds the tolerance {self.tolerance:.3g}"
        return text if self.source == "measured" else f"{text} ({self.source})"


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
    cost_basis: Literal["estimated_cost", "time", "macs", "roofline", "flops"] | None = Field(
        default=None,
        description="What by_cost weighs: Core ML's estimated cost, measured time, MACs (older estimates), "
        "roofline: max(FLOPs / peak, bytes / bandwidth) of each op on its device, from mlbench's cost model "
        "and a reference chip (estimates), or flops: each op's FLOPs by that cost model's conventions.",
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


COUNT_SHARE = "placement.count."
"""Prefix of a placement share by operation count (`placement.<device>` is the share by cost)."""


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

    @model_validator(mode="after")
    def _placement_shares_by_cost(self) -> RunRecord:
        """Records written before the placement shares went by cost carry `placement.<device>` as the share
        of operations and no `placement.count.<device>`: read as such, so that compare never weighs an
        operation count against a cost."""
        shares = [name for name, m in self.metrics.items() if name.startswith("placement.") and m.unit == "ratio"]
        if self.placement is None or not shares or any(n.startswith(COUNT_SHARE) for n in shares):
            return self
        by_cost = self.placement.by_cost
        for name in shares:
            device = name.removeprefix("placement.")
            self.metrics[COUNT_SHARE + device] = self.metrics[name]
            self.metrics[name] = (Metric(value=by_cost.get(device, 0.0), unit="ratio", source=self.placement.source)
                                  if by_cost else Metric.absent("ratio", "this record's placement gave no cost per "
                                                                f"operation; {COUNT_SHARE}{device} is the share by count"))
        return self


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
        "fetching artifacts (export), measuring (measure; of it, derived.computed and derived.cached: figures "
        "derived from an artifact, computed or found) and starting children (child_start summed, child_start_wall)."
    )
    summary: dict[Status, int] = Field(description="Number of records per status.")
    work: dict[str, dict[Literal["computed", "cached"], int]] = Field(default_factory=dict, description="Per kind of "
        "work (exported, derived figures: emulated, estimated...; timed), what this run did and what it found done.")
