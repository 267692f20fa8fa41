"""The `models:` section: where a model comes from and what its inputs mean (pydantic only, no torch).

```yaml
models:
  - name: bert_tiny
    source: transformers:BertModel          # or torchvision:NAME, pkg.module:factory, file.py:Factory,
    kwargs: {config: {hidden_size: 128}}    #    path/model.pt2, path/model.pt, path/saved_dir
    inputs:
      - {name: input_ids, dtype: int64, shape: [1, [64, 128]], range: [0, 1000]}   # enumerated lengths
      - {name: attention_mask, dtype: int64, shape: [1, [64, 128]], fill: ones}
  - name: classifier
    source: model.py:Net
    inputs:
      - {name: image, kind: image, shape: [1, 3, 224, 224], color_layout: RGB, scale: 0.0039}
```

A dimension is a number, a list of alternatives (enumerated: every enumerated dimension of a model
takes its k-th value together, and the model is measured at each), or `{min, max, default}` (a
range: exported flexible, measured at its default).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from mlbench.config.base import StrictModel, first_repeat
from mlbench.config.generate import GenerateSpec

SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
"""For pydantic's `pattern` (its regex engine's `$` is the end of the text); Python code uses SAFE_NAME_RE."""
SAFE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # always fullmatch: re's `$` matches before a final newline
SOURCE_PATTERN = re.compile(
    r"torchvision:[A-Za-z_]\w*|transformers:[A-Za-z_][\w.]*|[A-Za-z_][\w.]*:[A-Za-z_][\w.]*"
    r"|[^:\n]+\.py:[A-Za-z_][\w.]*|[^:\n]*/[^:\n]*|[^:/\n]+\.pt2?"
)  # always fullmatch
MAX_INPUT_ELEMENTS = 2**31 - 1  # 8 GB of float32 in one input: past this a shape is a typo
InputDtype = Literal["float32", "float16", "bfloat16", "int64", "int32", "bool"]
INTEGER_DTYPES = ("int64", "int32")
SAVED_SUFFIXES = (".pt2", ".pt")


class ShapeRange(StrictModel):
    """A flexible dimension: any size from min to max; measured at default."""

    min: int = Field(ge=1, description="Smallest size the export accepts.")
    max: int = Field(ge=1, description="Largest size the export accepts.")
    default: int = Field(ge=1, description="The size traced, measured and verified.")

    @model_validator(mode="after")
    def _ordered(self) -> ShapeRange:
        if not self.min <= self.default <= self.max:
            raise ValueError(f"a range needs min <= default <= max, got {self.min}, {self.default}, {self.max}")
        if self.min == self.max:
            raise ValueError(f"a range from {self.min} to {self.max} is one size: write {self.min}")
        return self


def _dimension_kind(value: Any) -> str:
    if isinstance(value, (dict, ShapeRange)):
        return "range"
    return "alternatives" if isinstance(value, list) else "size"


Dimension = Annotated[
    Annotated[Annotated[int, Field(ge=1)], Tag("size")]
    | Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1), Tag("alternatives")]
    | Annotated[ShapeRange, Tag("range")],
    Discriminator(_dimension_kind),
]
"""A size, a list of alternative sizes, or a range; each checked as what it looks like (one error, not three)."""


class ModelInput(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Input name used by exported models.")
    shape: list[Dimension] = Field(
        min_length=1,
        description="e.g. [1, 3, 224, 224]; a dimension may list alternatives ([1, [64, 128]], measured at each) "
        "or be a range ({min: 16, max: 512, default: 128}, measured at its default).",
    )
    dtype: InputDtype = Field(default="float32", description="Element type; floats are seeded normal values.")
    kind: Literal["tensor", "image"] = Field(
        default="tensor",
        description="image: a Core ML ImageType of pixels 0-255 (scale and bias applied in the model); eager "
        "PyTorch and ONNX Runtime get the same pixels as a tensor, times scale, plus bias.",
    )
    range: list[int] | None = Field(
        default=None, min_length=2, max_length=2,
        description="[low, high): integer inputs are drawn from it (e.g. token ids within the vocabulary); "
        "default [0, 10).",
    )
    fill: Literal["ones", "zeros"] | None = Field(default=None, description="A constant input (attention masks).")
    values: Path | None = Field(
        default=None,
        description="An .npz file (relative to this file) whose array named like the input holds real samples: "
        "the input's shape, or N samples along a leading axis (they feed verify.samples).",
    )
    color_layout: Literal["RGB", "BGR", "GRAYSCALE"] | None = Field(
        default=None, description="Image inputs: channel order of the pixels (default RGB).")
    scale: float | None = Field(default=None, description="Image inputs: the model sees pixel × scale + bias.")
    bias: list[float] | None = Field(default=None, description="Image inputs: one value per channel.")

    @model_validator(mode="after")
    def _consistent(self) -> ModelInput:
        given = [key for key in ("range", "fill", "values") if getattr(self, key) is not None]
        if len(given) > 1:
            raise ValueError(f"{' and '.join(given)} are exclusive: give one")
        if self.range is not None:
            if self.dtype not in INTEGER_DTYPES:
                raise ValueError(f"range is for integer inputs; this one is {self.dtype}")
            low, high = self.range
            if low >= high:
                raise ValueError(f"range [{low}, {high}) is empty: low must be below high")
        if self.values is not None and self.is_flexible:
            raise ValueError("values need a static shape (no alternatives or ranges)")
        if self.kind == "image":
            self._check_image()
        else:
            for key in ("color_layout", "scale", "bias"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key} applies to kind: image inputs")
        return self

    def _check_image(self) -> None:
        if self.dtype != "float32":
            raise ValueError(f"an image input is float32 pixels, not {self.dtype}")
        if self.range is not None or self.fill is not None:
            raise ValueError("an image input takes pixels 0-255: range and fill do not apply")
        channels = self.channels
        if len(self.shape) != 4 or self.shape[0] != 1 or self.shape[1] != channels:
            article = "an" if self.layout == "RGB" else "a"
            raise ValueError(f"{article} {self.layout} image input needs shape [1, {channels}, H, W], "
                             f"got {self.default_shape}")
        if self.bias is not None and len(self.bias) not in (1, channels):
            raise ValueError(f"bias needs {channels} value(s) for {self.layout}, got {len(self.bias)}")

    @property
    def layout(self) -> str:
        return self.color_layout or "RGB"

    @property
    def channels(self) -> int:
        return 1 if self.layout == "GRAYSCALE" else 3

    @property
    def is_flexible(self) -> bool:
        return any(not isinstance(d, int) for d in self.shape)

    @property
    def alternatives(self) -> int:
        """How many enumerated alternatives this input's shape has (1 without)."""
        return max((len(d) for d in self.shape if isinstance(d, list)), default=1)

    def concrete_shape(self, alternative: int = 0) -> list[int]:
        """The shape at enumerated alternative `alternative` (ranges at their default)."""
        dims: list[int] = []
        for dim in self.shape:
            if isinstance(dim, list):
                dims.append(dim[min(alternative, len(dim) - 1)])
            elif isinstance(dim, ShapeRange):
                dims.append(dim.default)
            else:
                dims.append(dim)
        return dims

    @property
    def default_shape(self) -> list[int]:
        return self.concrete_shape(0)

    @property
    def largest_elements(self) -> int:
        """Elements at the largest size every dimension allows."""
        sizes = [max(d) if isinstance(d, list) else d.max if isinstance(d, ShapeRange) else d for d in self.shape]
        return math.prod(sizes)

    @property
    def shape_text(self) -> str:
        return str(self.model_dump(mode="json")["shape"]).replace("'", "")

    def export_signature(self) -> dict[str, Any]:
        """What of the input shapes an exported artifact (not how its values are drawn)."""
        data = self.model_dump(mode="json", include={"name", "shape", "dtype"})
        if self.kind == "image":
            scale, bias = (1.0 if self.scale is None else self.scale), self.bias or [0.0]
            data.update(kind="image", color_layout=self.layout, scale=scale, bias=bias)
        return data


class ModelSpec(StrictModel):
    name: str = Field(pattern=SAFE_NAME, description="Safe identifier: letters, digits, - _ . (used in variant ids).")
    source: str | None = Field(
        default=None,
        description='"torchvision:NAME", "pkg.module:factory", "path/to/file.py:Factory", "transformers:ClassName" '
        '(kwargs: {config: {...}}: random weights, no download), or a saved model: "path/model.pt2" '
        "(torch.export), \"path/model.pt\" (TorchScript), \"path/saved_dir\" (Hugging Face save_pretrained); "
        "paths relative to this file. Leave it out when only existing artifacts (a target's package or onnx) "
        "are measured.",
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the factory.")
    inputs: list[ModelInput] = Field(min_length=1, description="Inputs, in the order forward() takes them.")
    bind: Literal["positional", "keyword"] | None = Field(
        default=None,
        description="How inputs reach forward(): in order, or by name (forward(input_ids=..., attention_mask=...)). "
        "Default: keyword for transformers sources, positional otherwise.",
    )
    generate: GenerateSpec | None = Field(
        default=None,
        description="Makes the model generative: prefill over each prompt length, then new_tokens decode steps "
        "against a key/value cache of context positions (docs/generate.md). The prompt comes in as input_ids.",
    )

    @field_validator("source")
    @classmethod
    def _source_shape(cls, value: str | None) -> str | None:
        if value is not None and not SOURCE_PATTERN.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a model source: use torchvision:NAME, pkg.module:factory, path/to/file.py:Factory, "
                "transformers:ClassName, path/model.pt2, path/model.pt or path/to/saved_dir"
            )
        return value

    @field_validator("inputs")
    @classmethod
    def _inputs_fit(cls, inputs: list[ModelInput]) -> list[ModelInput]:
        if (name := first_repeat([i.name for i in inputs])) is not None:
            raise ValueError(f"input name '{name}' is used twice; forward() takes each input once")
        for i in inputs:
            elements = i.largest_elements
            if elements > MAX_INPUT_ELEMENTS:
                raise ValueError(f"input '{i.name}' of shape {i.shape_text} has {elements:,} elements; "
                                 f"at most {MAX_INPUT_ELEMENTS:,} (2^31 - 1) are allowed")
        return inputs

    @model_validator(mode="after")
    def _alternatives_agree(self) -> ModelSpec:
        counts = {len(d) for i in self.inputs for d in i.shape if isinstance(d, list)}
        if len(counts) > 1:
            raise ValueError(f"enumerated dimensions vary together, so they need as many alternatives each; "
                             f"got {', '.join(map(str, sorted(counts)))}")
        ranges = any(isinstance(d, ShapeRange) for i in self.inputs for d in i.shape)
        if counts and ranges:
            raise ValueError("give a model either enumerated dimensions or ranges, not both")
        return self

    @property
    def source_kind(self) -> str:
        """'torchvision', 'transformers', 'module', 'file', 'saved' or 'none'."""
        source = self.source
        if source is None:
            return "none"
        if source.startswith("torchvision:"):
            return "torchvision"
        if source.startswith("transformers:"):
            return "transformers"
        if ":" not in source:
            return "saved"
        return "file" if source.rpartition(":")[0].endswith(".py") else "module"

    @property
    def keyword_inputs(self) -> bool:
        if self.bind is not None:
            return self.bind == "keyword"
        if self.source_kind == "saved":  # a Hugging Face folder, not a .pt2 or .pt file
            return not str(self.source).endswith(SAVED_SUFFIXES)
        return self.source_kind == "transformers"

    @property
    def alternatives(self) -> int:
        return max((i.alternatives for i in self.inputs), default=1)

    @property
    def enumerated_inputs(self) -> int:
        """How many inputs have more than one enumerated shape (Core ML needs iOS18 for two or more)."""
        return sum(1 for i in self.inputs if any(isinstance(d, list) and len(set(d)) > 1 for d in i.shape))

    def prompt_labels(self) -> list[str]:
        """A generative model's prompt axis values (`p32`, ...); [] for any other model."""
        return self.generate.labels() if self.generate is not None else []

    def shape_labels(self) -> list[str]:
        """One label per measured shape: the flexible dimensions' sizes (e.g. '128', '64x80'); [] when the
        inputs have no alternatives or ranges."""
        if not any(i.is_flexible for i in self.inputs):
            return []
        labels = []
        for k in range(self.alternatives):
            sizes: list[str] = []
            for item in self.inputs:
                for dim, size in zip(item.shape, item.concrete_shape(k)):
                    if not isinstance(dim, int) and str(size) not in sizes:
                        sizes.append(str(size))
            labels.append("x".join(sizes))
        return labels
