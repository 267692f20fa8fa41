"""A calibration profile (one chip and OS, written by `mlbench calibrate`), and which parameters and error
band an estimate for a chip uses: the user's profile for that chip if one is given, else the shipped
per-chip fit (chips.yaml), else the shared priors of an uncalibrated chip with the wider band.

Pydantic and YAML only: the fit itself lives in ``fitting`` (it needs the estimator).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from mlbench.backends.apple.chips import ChipId, ChipProfile, Fit, Parameters, builtin_chips
from mlbench.config.base import StrictModel
from mlbench.errors import UserError
from mlbench.records import Band

UNCALIBRATED = "uncalibrated chip"


class Observation(StrictModel):
    """What the Mac did with every op of one signature under one compute-units choice."""

    op_type: str
    dtype: str = Field(description="The op's output dtype (fp16, fp32, int32, ...; '?' when unknown).")
    shape: str = Field(description="Shape class of its output: rank and order of magnitude of its elements, "
                       "e.g. '4d:1e5' (10^5 to 10^6 elements); '?' when unknown.")
    rule: str = Field(description="The placement rule that decided the op in mlbench's estimate ('eligible' when "
                      "none kept it off the preferred device).")
    compute_units: str
    device: str = Field(description="Where the compute plan put most such ops.")
    seen: int = Field(ge=1, description="Ops of this signature in the measured runs.")
    agreed: int = Field(ge=1, description="How many of them ran on `device`.")
    rules_said: str | None = Field(default=None, description="Where mlbench's rules put most of them.")

    def key(self) -> tuple[str, str, str, str, str]:
        return (self.op_type, self.dtype, self.shape, self.rule, self.compute_units)


class ProfileRow(StrictModel):
    """One measured run and what the fitted model says of it."""

    model: str
    variant: str
    compute_units: str
    precision: str
    measured_ms: float = Field(description="Core ML's own median prediction time where recorded, else the "
                               "wall-clock median.")
    estimated_ms: float
    ratio: float = Field(description="estimated ÷ measured, with every run in the fit")
    loo_ratio: float | None = Field(default=None, description="estimated ÷ measured by a fit without this run")


class CalibrationProfile(StrictModel):
    """One chip and OS: fitted latency parameters and placement observations from measured runs."""

    version: Literal[1] = 1
    chip: ChipId = Field(description="The chip profile id (chips.yaml) of the Mac that measured.")
    chip_name: str
    os: str = Field(description="The OS the runs were measured on, e.g. 'macOS 14.5'.")
    created: str
    method: str
    data: list[str] = Field(description="The reports (or history runs) the profile was calibrated on.")
    runs: int = Field(ge=0, description="Measured runs (records) the latency fit used.")
    parameters: Parameters
    fitted: list[str] = Field(description="Parameters the runs determined.")
    kept_prior: dict[str, str] = Field(default_factory=dict,
                                       description="Parameter -> why the runs could not determine it.")
    rows: list[ProfileRow] = Field(default_factory=list)
    median_ratio: float | None = None
    worst_ratio: float | None = None
    loo_median_ratio: float | None = None
    loo_worst_ratio: float | None = None
    placements: list[Observation] = Field(default_factory=list)

    def band(self, where: str) -> Band | None:
        """The error band its estimates carry: leave-one-out where there was one, else the fit's own."""
        median, worst, how = self.loo_median_ratio, self.loo_worst_ratio, "LOO"
        if median is None or worst is None:
            median, worst, how = self.median_ratio, self.worst_ratio, "in-fit"
        if median is None or worst is None:
            return None
        return Band(median_ratio=max(median, 1.0), worst_ratio=max(worst, 1.0),
                    basis=f"{self.chip} (calibrated on {self.runs} measured runs, {how} ×{median:.2f}; "
                    f"{self.os}, profile {where})")

    def observations(self) -> dict[tuple[str, str, str, str, str], Observation]:
        return {o.key(): o for o in self.placements}


class LoadedProfile:
    """A profile and the file it came from."""

    def __init__(self, profile: CalibrationProfile, path: Path) -> None:
        self.profile, self.path = profile, path


def load_profile(path: Path) -> CalibrationProfile:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"cannot read the calibration profile: {str(exc).splitlines()[0]}", file=path) from None
    try:
        return CalibrationProfile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise UserError(f"not a calibration profile ({first['msg']})", file=path, where=where) from None


def _os_order(os_name: str) -> tuple[int, ...]:
    return tuple(int(p) for p in os_name.rpartition(" ")[2].split(".") if p.isdigit())


def load_profiles(path: Path) -> dict[str, LoadedProfile]:
    """The profiles in `path` (a profile file, or a folder of `*.yaml` ones) by chip id; where a chip has
    profiles for several OS versions, the newest OS's."""
    if not path.exists():
        raise UserError("no such calibration profile or folder (write one with `mlbench calibrate`)", file=path)
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    if not files:
        raise UserError("no calibration profiles (*.yaml) in this folder", file=path)
    chosen: dict[str, LoadedProfile] = {}
    for file in files:
        profile = load_profile(file)
        old = chosen.get(profile.chip)
        if old is None or _os_order(profile.os) > _os_order(old.profile.os):
            chosen[profile.chip] = LoadedProfile(profile, file)
    return chosen


def chip_parameters(fit: Fit, chip_id: str, profiles: dict[str, LoadedProfile] | None = None
                    ) -> tuple[Parameters, Band | None]:
    """The parameters and error band of an estimate on `chip_id`."""
    loaded = (profiles or {}).get(chip_id)
    if loaded is not None:
        return loaded.profile.parameters, loaded.profile.band(loaded.path.name)
    chips = builtin_chips()
    own = fit.per_chip.get(chip_id)
    if own is not None:
        params = transferred(fit, chip_id, chips) if own.fixed_ms is None else _own(fit, chip_id)
        return params, _shipped_band(fit, f"{chip_id} calibrated on {own.rows} of them ({own.os})")
    donor = transfer_donor(chip_id, _deciding(fit, "fixed"), chips)
    if donor is not None and fit.uncalibrated_median_ratio is not None and fit.uncalibrated_worst_ratio is not None:
        params = transferred(fit, chip_id, chips)
        over = ", ".join(fit.uncalibrated_chips) or ", ".join(sorted(fit.per_chip))

        def carried(what: str, words: str) -> str | None:
            source = transfer_donor(chip_id, _deciding(fit, what), chips)
            if source is None:
                return None
            if what == "efficiency":
                return f"{words} from {source}"
            same = chips[source].neural_engine.generation == chips[chip_id].neural_engine.generation
            how = "the same engine" if same else "scaled by the two generations' published peaks"
            return f"{words} from {source} ({how})"

        parts = [p for p in (carried("fixed", "the fixed cost per prediction"), carried("dispatch", "the per-op cost"),
                             carried("efficiency", "the Neural Engine's efficiency")) if p]
        return params, Band(
            median_ratio=fit.uncalibrated_median_ratio, worst_ratio=fit.uncalibrated_worst_ratio,
            basis=f"{UNCALIBRATED} ({chip_id}): no calibration row on the chip, so each cost carries from the nearest "
            f"calibrated Neural Engine generation whose rows decided it: {', '.join(parts)}; band: leave-one-chip-out "
            f"over {over} (each chip's rows predicted by a fit without them); calibrated {fit.date}")
    return fit.parameters, _shipped_band(fit, None)


def _deciding(fit: Fit, what: str) -> list[str]:
    """The calibrated chips whose rows decided their fixed cost (`fixed`), their Neural Engine's per-op cost
    (`dispatch`) or its efficiency (`efficiency`). A cost carries only from these: a chip whose rows left a cost at
    its prior has nothing of its own to give (carrying M1 Pro's prior per-op cost to A14 made its estimates ×1.5)."""
    if what == "fixed":
        return sorted(c for c, f in fit.per_chip.items() if f.fixed_ms is not None)
    if what == "dispatch":
        return sorted(c for c, f in fit.per_chip.items() if "neural_engine" in f.dispatch_ms)
    return sorted(c for c, f in fit.per_chip.items() if "neural_engine" in f.efficiency)


def _own(fit: Fit, chip_id: str) -> Parameters:
    """A calibrated chip's parameters: the shared ones under its own fixed cost, dispatch and efficiencies."""
    own = fit.per_chip[chip_id]
    shared = fit.calibrated or fit.parameters
    return shared.model_copy(update={"fixed_ms": own.fixed_ms if own.fixed_ms is not None else shared.fixed_ms,
                                     "dispatch_ms": {**shared.dispatch_ms, **own.dispatch_ms},
                                     "efficiency": {**shared.efficiency, **own.efficiency}})


def transfer_donor(chip_id: str, calibrated: list[str], chips: dict[str, ChipProfile]) -> str | None:
    """The calibrated chip whose costs carry to `chip_id`: the nearest Neural Engine generation (an older one on
    a tie, then the same kind of device: phone chips A*, Mac chips M*), then the nearest published peak."""
    target = chips.get(chip_id)
    if target is None or target.generation_index is None:
        return None
    scored = []
    for other in calibrated:
        profile = chips.get(other)
        if profile is None or profile.generation_index is None or other == chip_id:
            continue
        gap = profile.generation_index - target.generation_index
        peak = abs(math.log(profile.neural_engine.flops_fp16 / target.neural_engine.flops_fp16))
        scored.append((abs(gap), gap > 0, other[0] != chip_id[0], peak, other))
    return min(scored)[-1] if scored else None


def cost_scale(donor: str, chip_id: str, chips: dict[str, ChipProfile]) -> float:
    """What a donor's fixed and per-op Neural Engine costs are multiplied by on `chip_id`: 1 within one Neural Engine
    generation (the same engine design: an M1 Ultra's 32 cores or an M3's clock do not make Core ML's per-op work
    cheaper), else the ratio of the two generations' published peaks, each generation's named by its first phone
    chip (A14 11, A15 15.8, A16 17, A17 Pro 17.5 float16 TFLOPS): a newer engine runs its fixed work faster by about
    what Apple says the generation gained, not by how many cores a die adds."""
    donor_gen, target_gen = chips[donor].neural_engine.generation, chips[chip_id].neural_engine.generation
    if donor_gen == target_gen or donor_gen not in chips or target_gen not in chips:
        return 1.0
    return chips[donor_gen].neural_engine.flops_fp16 / chips[target_gen].neural_engine.flops_fp16


def transferred(fit: Fit, chip_id: str, chips: dict[str, ChipProfile]) -> Parameters:
    """What `chip_id` takes from calibrated chips where its own rows decide nothing (or it has none): the fixed cost
    per prediction and the Neural Engine's per-op cost, each from the nearest calibrated generation whose rows
    decided that cost (as it is within one generation, else scaled by the generations' published peaks:
    cost_scale), and the Neural Engine efficiency of the nearest generation whose rows decided that. Its own
    fitted values stay."""
    shared = fit.calibrated or fit.parameters
    params = shared
    donor = transfer_donor(chip_id, _deciding(fit, "fixed"), chips)
    if donor is not None:
        fixed = fit.per_chip[donor].fixed_ms or shared.fixed_ms  # _deciding chose a donor whose rows decided it
        params = params.model_copy(update={"fixed_ms": fixed * cost_scale(donor, chip_id, chips)})
    source = transfer_donor(chip_id, _deciding(fit, "dispatch"), chips)
    if source is not None:
        per_op = fit.per_chip[source].dispatch_ms["neural_engine"] * cost_scale(source, chip_id, chips)
        params = params.model_copy(update={"dispatch_ms": {**params.dispatch_ms, "neural_engine": per_op}})
    speed = transfer_donor(chip_id, _deciding(fit, "efficiency"), chips)
    if speed is not None:
        efficiency = {**params.efficiency, "neural_engine": fit.per_chip[speed].efficiency["neural_engine"]}
        params = params.model_copy(update={"efficiency": efficiency})
    own = fit.per_chip.get(chip_id)
    if own is not None:
        params = params.model_copy(update={"dispatch_ms": {**params.dispatch_ms, **own.dispatch_ms},
                                           "efficiency": {**params.efficiency, **own.efficiency}})
    return params


def _shipped_band(fit: Fit, which: str | None) -> Band:
    tail = f" ({which})" if which else ""
    if fit.loo_median_ratio is not None and fit.loo_worst_ratio is not None:
        return Band(median_ratio=fit.loo_median_ratio, worst_ratio=fit.loo_worst_ratio,
                    basis=f"{len(fit.rows)} published Core ML latencies{tail}, each predicted by a fit without it"
                    f"; calibrated {fit.date}")
    return Band(median_ratio=fit.median_ratio, worst_ratio=fit.worst_ratio,
                basis=f"{len(fit.rows)} published Core ML latencies the model was fitted to{tail}; "
                f"calibrated {fit.date}")
