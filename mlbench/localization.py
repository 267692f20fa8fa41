"""Where an export loses accuracy: per-op and per-module error against a reference, as data.

A backend that can run its artifact op by op (Core ML's interpreter, ONNX Runtime with its
intermediates as outputs) fills an `ErrorLocalization`; reports and `mlbench explain` only render it.
The figures, per op of the variant's program:

- `rel_error`: ‖variant − reference‖ / ‖reference‖ of the op's output over every sample (`snr_db` is
  −20·log10 of it): the error accumulated up to and including this op;
- `growth_db`: how many dB of SNR the op lost over the worst of its inputs (what this op added);
- `share`: the share of the final output's error energy that remains when only this op (or module)
  computes as the variant does and everything else as the reference: Σerr² / Σerr² of the variant.
  Shares of different ops need not add to 1 (errors interact), but an op with 0.9 carries the error.

Data only (pydantic and numpy), no backend: the core reads it through `ErrorLocalization.model_validate`.
"""

from __future__ import annotations

import math
from pathlib import PurePath
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

JUMP_DB = 6.0
"""An op "jumps" when it loses at least this many dB of SNR over its inputs ..."""
JUMP_NEAR_OUTPUT_DB = 10.0
"""... and its own SNR is within this many dB of the final output's (its error already matters there)."""
EXACT_DB = 300.0
"""The SNR an exact input counts as when an op's growth is taken (beyond any float's resolution)."""

Pairing = Literal["input", "name", "structure", "cast", "unpaired"]


class OpOrigin(BaseModel):
    """The PyTorch code an op was converted from."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    module: str = Field(description="Module path in the model (`encoder.layer.3.attention`); '' for the model itself.")
    module_type: str | None = Field(default=None, description="The module's class, qualified where known.")
    op: str = Field(description="The torch op it came from (`softmax`, `linear`).")
    file: str | None = Field(default=None, description="Source file of the line that called the op.")
    line: int | None = Field(default=None, description="That line.")

    @property
    def label(self) -> str:
        """`encoder.layer.3.attention.softmax`; a torch.nn layer's own op is the layer (`encoder.fc`)."""
        if self.module and (self.module_type or "").startswith("torch.nn.") and _own_op(self.module_type, self.op):
            return self.module
        return f"{self.module}.{self.op}" if self.module else self.op

    @property
    def where(self) -> str | None:
        """`models.py:88`, or None when the source line is unknown."""
        if self.file is None or self.line is None:
            return None
        return f"{PurePath(self.file).name}:{self.line}"

    @property
    def described(self) -> str:
        return f"{self.label} ({self.where})" if self.where else self.label


def _own_op(module_type: str | None, op: str) -> bool:
    """Whether `op` is what a torch.nn layer of this class computes (Linear: linear, Conv2d: conv2d...)."""
    name = (module_type or "").rsplit(".", 1)[-1].lower()
    op = op.lower().strip("_")
    return name == op or name.startswith(op) or op.startswith(name) or op in ("convolution", "_convolution")


class OpError(BaseModel):
    """One op of the variant's program, beside its reference op."""

    model_config = ConfigDict(ser_json_inf_nan="strings")  # an overflow's -inf SNR survives JSON

    index: int = Field(description="Position in the variant's program (top-level ops, constants left out).")
    name: str = Field(description="The op's output name in the variant's program.")
    op_type: str
    reference: str | None = Field(default=None, description="The reference op's output it was compared with.")
    pairing: Pairing = Field(description="How the pair was made: same input, same name (casts' suffixes removed), "
                             "same type over paired inputs, a cast the reference lacks; or not at all.")
    why_unpaired: str | None = None
    origin: OpOrigin | None = None
    rel_error: float | None = Field(default=None, description="‖variant − reference‖ / ‖reference‖ (inf: not finite).")
    snr_db: float | None = None
    growth_db: float | None = Field(default=None, description="SNR lost at this op over its worst input.")
    share: float | None = Field(default=None, description="Share of the final output's error energy with only this "
                                "op computed as the variant does (null: not measured for this op).")

    @property
    def described(self) -> str:
        return self.origin.described if self.origin is not None else f"{self.op_type} '{self.name}'"


class ModuleError(BaseModel):
    """The ops converted from one module (and the modules under it), taken together."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    module: str
    where: str | None = None
    ops: int
    share: float | None = Field(default=None, description="Share of the final output's error energy with only this "
                                "module's ops computed as the variant does.")
    snr_db: float | None = Field(default=None, description="SNR of the module's last output versus the reference.")
    weight_bytes_saved: int | None = Field(default=None, description="Bytes its compressed weights save over the "
                                           "reference's weights (compressed variants).")


class EagerModule(BaseModel):
    """A module's output in the variant's program against eager PyTorch's (forward hooks)."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    module: str
    op: str = Field(description="The variant op whose output stands for the module's.")
    snr_db: float | None
    growth_db: float | None = None


class LayerAdvice(BaseModel):
    """Which modules to leave uncompressed, and what that should buy."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    recipe: str = Field(description="Name of the variant's recipe.")
    advised_recipe: str = Field(description="Name the advised recipe takes.")
    exclude: list[str] = Field(description="Module paths to leave uncompressed (the recipe's `exclude`).")
    override: dict = Field(description="The recipe with `exclude`, as `optimizations:` takes it.")
    expected_snr_db: float | None = Field(default=None, description="The output SNR expected with them excluded "
                                          "(from their shares; estimated).")
    min_snr_db: float | None = None
    kept_saving: float | None = Field(default=None, description="Share of the recipe's weight saving that remains.")
    reason: str


class ErrorLocalization(BaseModel):
    """Per-op error of one variant against its reference, the first op where it jumps, the top contributors.
    Stored in a run record's details as ``json.loads(model_dump_json())`` (not-finite figures as strings)."""

    model_config = ConfigDict(ser_json_inf_nan="strings")

    variant: str
    backend: str
    reference: str = Field(description="What the variant was compared with, in words.")
    source: Literal["emulated", "measured", "reference"] = Field(description="How the variant's values were had.")
    samples: int
    seconds: float = Field(description="Wall time of the localization (both programs run, shares measured).")
    cached: bool = Field(default=False, description="Found in the artifact cache, computed by an earlier run or "
                         "`mlbench explain`: `seconds` is the time it took then.")
    output_snr_db: float | None = Field(description="The final outputs' SNR against the reference (worst output).")
    first_jump: int | None = Field(default=None, description="Index into ops of the first op where the error jumps.")
    ops: list[OpError]
    modules: list[ModuleError] = Field(default_factory=list, description="Modules by share, largest first.")
    eager: list[EagerModule] | None = Field(default=None, description="Module outputs against eager PyTorch, in "
                                            "execution order; null when eager was not run.")
    advice: LayerAdvice | None = None
    notes: list[str] = Field(default_factory=list)

    @property
    def unpaired(self) -> list[OpError]:
        return [op for op in self.ops if op.pairing == "unpaired"]

    def top(self, count: int = 5) -> list[OpError]:
        """The ops with the largest shares (measured ones), largest first."""
        measured = [op for op in self.ops if op.share is not None]
        return sorted(measured, key=lambda op: -op.share)[:count]  # type: ignore[operator]


# ---------------------------------------------------------------------------------------- figures


class ErrorSum:
    """Σ(variant − reference)² and Σreference² over samples, for one value."""

    __slots__ = ("finite", "noise", "signal")

    def __init__(self) -> None:
        self.noise = 0.0
        self.signal = 0.0
        self.finite = True

    def add(self, actual: np.ndarray, reference: np.ndarray) -> None:
        a = np.asarray(actual, dtype=np.float64).ravel()
        r = np.asarray(reference, dtype=np.float64).ravel()
        if not np.isfinite(a).all() and np.isfinite(r).all():
            self.finite = False
            return
        ok = np.isfinite(a) & np.isfinite(r)
        self.noise += float(np.sum((a[ok] - r[ok]) ** 2))
        self.signal += float(np.sum(r[ok] ** 2))

    @property
    def rel_error(self) -> float:
        if not self.finite:
            return math.inf
        if self.noise == 0.0:
            return 0.0
        return math.sqrt(self.noise / self.signal) if self.signal > 0 else math.inf

    @property
    def snr_db(self) -> float | None:
        """None when exact; -inf when not finite or the reference is all zero."""
        return snr_of(self.rel_error)


def snr_of(rel_error: float) -> float | None:
    if rel_error == 0.0:
        return None
    if not math.isfinite(rel_error):
        return -math.inf
    return -20.0 * math.log10(rel_error)


def db(value: float | None) -> float:
    """An SNR as a number that orders: exact is +inf."""
    return math.inf if value is None else value


def growth_db(inputs: list[float | None], output: float | None) -> float | None:
    """dB of SNR lost from the worst input to the output (exact counts as EXACT_DB); None when the output
    is exact."""
    if output is None:
        return None
    worst = min((EXACT_DB if v is None else min(v, EXACT_DB) for v in inputs), default=EXACT_DB)
    if output == -math.inf:
        return math.inf if worst > -math.inf else 0.0
    return worst - output


def needs_localization(verification: object, factor: float) -> bool:
    """Whether a verification failed, or passed within ``factor`` times its limits: max_rel at least
    tolerance / factor, or an SNR within 20·log10(factor) dB of its floor."""
    if not getattr(verification, "passed", True):
        return True
    max_rel, tolerance = getattr(verification, "max_rel", None), getattr(verification, "tolerance", None)
    if isinstance(max_rel, float) and isinstance(tolerance, float) and tolerance > 0 and max_rel * factor >= tolerance:
        return True
    snr, floor = getattr(verification, "snr_db", None), getattr(verification, "min_snr_db", None)
    return snr is not None and floor is not None and snr <= floor + 20 * math.log10(max(factor, 1.0))


def as_record(localization: ErrorLocalization) -> dict:
    """The localization as a run record's details keep it (plain JSON; inf as strings)."""
    import json

    return dict(json.loads(localization.model_dump_json()))


def first_jump(ops: list[OpError], output_snr_db: float | None) -> int | None:
    """Index of the first op (program order) that loses JUMP_DB over its inputs and whose SNR is within
    JUMP_NEAR_OUTPUT_DB of the output's; the first not-finite op always counts."""
    floor = db(output_snr_db) + JUMP_NEAR_OUTPUT_DB
    for position, op in enumerate(ops):
        if op.snr_db is None or op.growth_db is None:
            continue
        if op.snr_db == -math.inf:
            return position
        if op.growth_db >= JUMP_DB and op.snr_db <= floor:
            return position
    return None
