"""Who feeds whom in an ML program, and which operations only carry integer or bool data (a mask or an
index being built): the walk leaves those out when it decides the program's precision, and placement
puts them beside the operation they feed.

A float32 transformer that takes an attention mask shows why both matter: coremltools turns the int32
mask into bool, casts it to float16 to gather it into shape, casts it back to bool and combines it
(`cast`, `gather_nd`, `cast`, `logical_and`). Those float16 outputs carry 0s and 1s, not the model's
arithmetic: counted as evidence of precision they made a float32 program "mixed", and a mixed program
was placed as if the Neural Engine could take it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlbench.backends.apple.analysis.mil import tensor_info

if TYPE_CHECKING:
    from mlbench.backends.apple.analysis.mil import Program

FLOAT_DTYPES = frozenset({"fp16", "fp32", "fp64", "bf16", "fp8e4m3fn", "fp8e5m2"})
WIDE_INTEGERS = frozenset({"int16", "int32", "int64", "uint16", "uint32", "uint64"})
#: Operations that move, select or convert data without arithmetic on it: on an integer path when
#: the data they carry is integer or bool data (a mask cast to float16 and gathered).
CARRIERS = frozenset({
    "cast", "gather", "gather_nd", "gather_along_axis", "reshape", "expand_dims", "squeeze", "transpose",
    "slice_by_index", "slice_by_size", "tile", "concat", "split", "stack", "identity", "reverse", "pad",
})
#: The inputs that hold a carrier's data (the others are indices, shapes, axes): a gather from a float
#: table by integer indices is an embedding lookup, not an integer path.
DATA_INPUTS = ("x", "values")


class DataFlow:
    """Producers of each compute operation (as indices into the walk's list of compute ops) and the
    values that carry only integer or bool data, filled in program order by `add`."""

    def __init__(self, prog: Program) -> None:
        self.prog = prog
        self.index: dict[str, int] = {}  # value name -> the compute op that produced it
        self.integer_values: set[str] = {
            name for name in prog.input_names if tensor_info(prog.var_types[name])[0] not in FLOAT_DTYPES}

    def runtime_inputs(self, op: Any) -> list[str]:
        """Names of the values `op` reads that are computed at run time (constants left out)."""
        names = []
        for binding in op.inputs.values():
            for arg in binding.arguments:
                if arg.WhichOneof("binding") != "name":
                    continue
                producer = self.prog.producer.get(arg.name)
                if producer is not None and producer.type.rsplit(".", 1)[-1] == "const":
                    continue
                names.append(arg.name)
        return names

    def add(self, op: Any, op_type: str, out_dtype: str | None, position: int) -> tuple[list[int], bool]:
        """Record compute op number `position`: (the compute ops it reads from, whether it is on an
        integer path: its result is not floating point, or it only carries integer or bool data)."""
        names = self.runtime_inputs(op)
        producers = list(dict.fromkeys(self.index[n] for n in names if n in self.index))
        integer = out_dtype is not None and out_dtype not in FLOAT_DTYPES
        if not integer and op_type in CARRIERS:
            data = [arg for key in DATA_INPUTS if key in op.inputs for arg in op.inputs[key].arguments]
            integer = bool(data) and all(self._integer(arg) for arg in data)
        for out in op.outputs:
            self.index[out.name] = position
            if integer:
                self.integer_values.add(out.name)
        return producers, integer

    def reads_wide_integer(self, op: Any) -> bool:
        """Whether `op` reads a 16-bit or wider integer computed at run time (or a program input)."""
        return any(tensor_info(self.prog.var_types[name])[0] in WIDE_INTEGERS
                   for name in self.runtime_inputs(op) if name in self.prog.var_types)

    def _integer(self, arg: Any) -> bool:
        """Whether an argument holds integer or bool data: of such a type, or a value an integer path made."""
        if arg.WhichOneof("binding") == "name" and arg.name in self.integer_values:
            return True
        value_type = self.prog.arg_type(arg)
        dtype = tensor_info(value_type)[0] if value_type is not None else None
        return dtype is not None and dtype not in FLOAT_DTYPES
