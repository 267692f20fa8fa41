"""The records a static analysis hands to reports: what a saved Core ML model holds, op by op.

Kept apart from the code that reads packages so that reports and placement rules can import
the shapes without importing protobuf or coremltools.

Definitions used throughout:

* **Compute op**: every MIL operation except ``const`` and the ``constexpr_*`` ops, which
  only materialise weights (data, not computation).  ``constexpr_*`` ops are counted
  apart in ``weight_ops``.
* **Weight**: a ``const`` of a numeric dtype other than int32/int64/uint32 and of rank
  >= 1 that feeds a compute op (conv/linear weights, biases, norm scales, embedding
  tables...), or the output of a ``constexpr_*`` op.  Scalars and int32 index/shape
  constants are parameters of the op, not weights.
* **Params**: elements of the dense weights the compute ops see (a palettized weight of
  shape 16x8x3x3 is 1152 params, whatever its storage).
* **Weight bytes as stored**: bytes of the data that is stored for the weights: for a
  plain const its dtype x elements; for ``constexpr_lut_to_dense`` the packed indices plus
  the look-up table; for ``constexpr_affine_dequantize`` / ``constexpr_blockwise_shift_scale``
  the quantized data plus scales and zero points/offsets; for ``constexpr_sparse_to_dense``
  the non-zero data plus the bit mask.  Blob-backed values use the size recorded in the
  weight file's blob header; inline values use their declared type.
* **MACs**: multiply-accumulates of conv, conv_transpose, linear, matmul and einsum only;
  other ops have ``macs=None`` (not counted).
* **FLOPs and bytes**: of every compute op, by the cost model (``mlbench.backends.apple.cost``:
  2 x MACs for the ops above, conventions per op family for the others).
* **Precision**: from the floating-point output dtypes of the compute ops that compute,
  leaving out every ``cast`` (the ops it feeds say in which precision they compute; this
  includes the casts coremltools inserts at the program boundary) and the ops on an integer
  path (a bool mask cast to float16 and gathered carries 0s and 1s, not the model's
  arithmetic: see ``dataflow``).  Only when no op is left do the other non-boundary ops decide.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Precision = Literal["FLOAT32", "FLOAT16", "MIXED", "UNKNOWN"]
ANALYSIS_VERSION = 2
"""Raised when the analysis of the same package changes, so that analyses stored beside cached packages
are made again (2: the precision decided on the ops that compute; producers and integer paths per op)."""


class TensorDescription(BaseModel):
    """A model input or output as the spec describes it."""

    name: str
    kind: str = Field(description="tensor, image, int64, double, string, dictionary, sequence, state")
    shape: list[int | None] | None = Field(
        default=None, description="default shape; None for a flexible dimension; image: [height, width]"
    )
    dtype: str | None = Field(default=None, description="fp32, fp16, int32...; colour space for images")
    flexible: bool = Field(default=False, description="the shape has ranges or enumerated alternatives")


class LayerInfo(BaseModel):
    """One compute operation (an ML program op, or a neural-network layer)."""

    name: str
    op_type: str
    output_dtype: str | None = None
    output_shape: list[int | None] | None = Field(default=None, description="None for an unknown dimension")
    macs: int | None = Field(default=None, description="multiply-accumulates; None: not counted or unknown")
    # --- cost model (mlbench/backends/apple/cost) ---
    flops: int | None = Field(default=None, description="FLOPs by mlbench's cost model; None: unknown")
    bytes: int | None = Field(
        default=None, description="bytes read (inputs, weights as stored) + written (outputs); None: unknown"
    )
    # --- end cost model ---
    params: int | None = Field(default=0, description="elements of the weights this op is first to use")
    weight_bytes: int | None = Field(default=0, description="bytes of those weights as stored")
    weight_storage: str | None = Field(
        default=None, description="how the weights are stored, e.g. 'fp16' or 'lut(uint4 indices, fp16 lut)'"
    )
    depth: int = Field(default=0, description="nesting depth: 0 in the function body, 1 inside a cond/loop block")
    inputs: list[int] = Field(default_factory=list, description="the compute ops whose results this op reads "
                              "(their positions in the list of compute ops); constants and program inputs left out")
    integer_data: bool = Field(default=False, description="the op is on an integer path: its result is not "
                               "floating point (int32, bool), or it only casts, moves or gathers such data (a "
                               "mask or an index being built)")
    attributes: dict[str, Any] = Field(
        default_factory=dict,
        description="parameters that decide where an op can run: dilations, kernel_sizes, strides, scale factors, "
        "dynamic_shape when a reshape's shape is computed at run time, and wide_integer_input when the op reads "
        "a 16-bit or wider integer computed at run time",
    )


class Totals(BaseModel):
    """Sums over the compute ops."""

    compute_ops: int
    const_ops: int
    weight_ops: int = Field(description="constexpr_* ops (compressed weights materialised at load)")
    params: int | None = Field(description="None where not analysed")
    weight_bytes: int | None = Field(description="bytes of weights as stored (compressed size); None where not analysed")
    macs: int | None = Field(description="MACs of conv/conv_transpose/linear/matmul/einsum with known shapes")
    # --- cost model (mlbench/backends/apple/cost) ---
    flops: int | None = Field(description="FLOPs of every compute op by mlbench's cost model (ops with unknown "
                              "FLOPs left out; 2 x macs for conv/linear/matmul/einsum)")
    bytes: int | None = Field(default=None, description="bytes read + written by every compute op (unknown left out)")
    arithmetic_intensity: float | None = Field(default=None, description="flops / bytes")
    # --- end cost model ---
    macs_complete: bool = Field(description="False when some MAC ops have unknown shapes (macs is then a lower bound)")


class ProgramAnalysis(BaseModel):
    """What a saved Core ML model holds, read statically."""

    model_config = ConfigDict(protected_namespaces=())

    path: str
    analysis_version: int = Field(default=ANALYSIS_VERSION, description="the analysis that read it (ANALYSIS_VERSION)")
    model_type: str = Field(description="mlProgram, neuralNetwork, neuralNetworkClassifier, pipeline...")
    spec_version: int
    min_os: str | None = Field(default=None, description="first iOS release that reads this spec version")
    opset: str | None = Field(default=None, description="MIL opset of the analysed function, e.g. CoreML7")
    opset_os: str | None = Field(default=None, description="OS release of that opset, e.g. iOS17")
    function: str | None = Field(default=None, description="the analysed ML program function")
    functions: list[str] = Field(default_factory=list)
    precision: Precision
    dtype_counts: dict[str, int] = Field(
        default_factory=dict, description="compute ops per floating-point output dtype, of the ops that decide the "
        "precision (casts and integer-path ops left out)"
    )
    op_counts: dict[str, int] = Field(description="compute op type -> count")
    const_count: int
    weight_ops: dict[str, int] = Field(default_factory=dict, description="constexpr_* op type -> count")
    layers: list[LayerInfo]
    totals: Totals
    package_size_bytes: int
    inputs: list[TensorDescription]
    outputs: list[TensorDescription]
    notes: list[str] = Field(default_factory=list)
