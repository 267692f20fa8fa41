"""A backend from outside mlbench: registered only by its distribution's entry point.

It "exports" by scaling the model's outputs (`gain`), times the eager model, and says every
operation ran on its own device, `toy_accel`. Nothing in mlbench/ names it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from mlbench.backends.base import Backend, Exported, Measurement, placement_metrics, runtime_metrics
from mlbench.config.base import Axis, TargetBase
from mlbench.plugins.spec import CPU, BackendSpec, DeviceInfo
from mlbench.records import OpPlacement, Placement

TOY_ACCEL = DeviceInfo(name="toy_accel", label="Toy accelerator", short="TOY", color="#6a1b9a", rank=5)


class ToyTarget(TargetBase):
    """The toy runtime."""

    backend: Literal["toy"] = Field(description="The toy backend.")
    gain: Axis[Literal["1", "2"]] = Field(default=["1"], description="Output scale.")
    mode: Axis[Literal["fast", "steady"]] = Field(default=["fast"], description="A measurement-only axis.")

    axes = ("gain", "mode")
    artifact_axes = ("gain",)


class ToyBackend(Backend):
    name = "toy"

    def export(self, model, variant) -> Exported:
        return Exported(payload=float(variant.axis("gain")))

    def measure(self, model, exported, variant) -> Measurement:
        import torch

        from mlbench.timing import time_calls, time_once
        from mlbench.verify import compare_outputs

        def call():
            with torch.inference_mode():
                return model.module(*model.example_inputs) * exported.payload

        first_ms, output = time_once(call)
        settings = self.config.latency
        latency = time_calls(call, warmup=settings.warmup, repeats=settings.repeats,
                             min_time_s=settings.min_time_s, max_repeats=settings.max_repeats, threads=None)
        verify = compare_outputs(model.reference, [output.numpy()], tolerance=1e-4, min_snr_db=60.0,
                                 reference_name="eager")
        ops = [OpPlacement(name="all", op_type="toy", device="toy_accel")]
        placement = Placement(source="measured", method="toy", compute_ops=1, constants=0,
                              by_count={"toy_accel": 1.0}, by_cost={"toy_accel": 1.0}, cost_basis="time",
                              switches=0, ops=ops)
        metrics = {**runtime_metrics(latency, first_ms=first_ms, verify=verify), **placement_metrics(placement)}
        return Measurement(metrics=metrics, latency=latency, verify=verify, placement=placement)


def render_section(records, artifacts) -> list[str]:
    return [f"Toy section: {len(records)} toy records.", ""]


SPEC = BackendSpec(name="toy", target=ToyTarget, backend="mlbench_toy:ToyBackend", devices=(TOY_ACCEL, CPU),
                   report_sections=("mlbench_toy:render_section",), default_rules=("placement.toy_accel:-5pp",))
