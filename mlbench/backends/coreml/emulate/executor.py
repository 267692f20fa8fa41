"""Running a loaded ML program op by op.

``Emulator(program)`` prepares the program once: it decodes every ``const``, folds the
``constexpr_*`` ops (their inputs are constants by definition) and resolves each op's kernel.
``Emulator.run(inputs)`` then executes ``main`` in program order, nested blocks (``cond``,
``while_loop``) included, storing each op's outputs in their declared dtype (``precision.store``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mlbench.backends.coreml.emulate.kernels import supported_op_types
from mlbench.backends.coreml.emulate.kernels_state import EmulatedState, make_state
from mlbench.backends.coreml.emulate.precision import PRECISIONS, from_numpy, store, to_numpy
from mlbench.backends.coreml.emulate.program import Block, Op, Program, TypeInfo
from mlbench.backends.coreml.emulate.registry import KERNELS, Kernel

__all__ = ["EmulationError", "Emulator", "UnsupportedOps", "find_unsupported"]

_MAX_LOOP_ITERATIONS = 1_000_000
Observer = Callable[["_Step", dict[str, Any], list[Any]], "list[Any] | None"]
_LITERAL = object()


class UnsupportedOps(Exception):
    """The program holds op types the interpreter has no kernel for; nothing was run."""

    def __init__(self, ops: list[str]) -> None:
        self.ops = list(ops)
        super().__init__(
            f"the Core ML interpreter has no kernel for op type(s): {', '.join(self.ops)}"
        )


class EmulationError(RuntimeError):
    """An op failed while running; the message names it."""


def find_unsupported(program: Program) -> list[str]:
    supported = supported_op_types()
    return sorted({t for t in program.op_types() if t not in supported})


@dataclass
class _Step:
    op: Op
    kernel: Kernel | None
    # input name -> list of (variable name or None, literal value)
    args: list[tuple[str, list[tuple[str | None, Any]], bool]]
    outputs: list[tuple[str, str | None]]  # (name, declared dtype)
    blocks: list[list[_Step]]  # prepared nested blocks


class Emulator:
    """A prepared program; ``run`` may be called many times."""

    def __init__(self, program: Program, precision: str = "declared") -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
        missing = find_unsupported(program)
        if missing:
            raise UnsupportedOps(missing)
        self.program = program
        self.precision = precision
        self.types: dict[str, TypeInfo] = dict(program.inputs)
        self.constants: dict[str, Any] = {}
        self.steps = self._prepare(program.main)

    # ------------------------------------------------------------------ preparation

    def _prepare(self, block: Block) -> list[_Step]:
        steps: list[_Step] = []
        for name, info in block.inputs:
            self.types[name] = info
        for op in block.ops:
            for name, info in op.outputs:
                self.types[name] = info
            outputs = [(name, info.dtype) for name, info in op.outputs]
            if op.type == "const":
                self.constants[op.outputs[0][0]] = store(_to_torch(op.attributes["val"]), outputs[0][1], self.precision)
                continue
            kernel = KERNELS.get(op.type)
            params = dict(op.attributes)
            args = []
            for key, bindings in op.inputs.items():
                refs = [(b.name, None if b.name else _to_torch(b.value)) for b in bindings]
                variadic = (kernel is not None and key in kernel.variadic) or (op.type, key) == ("while_loop", "loop_vars")
                args.append((key, refs, variadic or len(refs) > 1))
            for key, value in params.items():
                args.append((key, [(None, _to_torch(value))], False))
            step = _Step(op, kernel, args, outputs, [self._prepare(b) for b in op.blocks])
            if op.type.startswith("constexpr_") and all(n is None or n in self.constants for _, refs, _v in args
                                                        for n, _ in refs):
                for (name, _dtype), value in zip(outputs, self._execute(step, self.constants)):
                    self.constants[name] = value
                continue
            steps.append(step)
        return steps

    # ------------------------------------------------------------------ running

    def make_state(self) -> EmulatedState:
        """Zeroed state cells for this program's ``ct.StateType`` inputs (``MLModel.make_state()``'s analogue)."""
        return make_state(self.program, self.precision)

    def run(self, inputs: dict[str, np.ndarray], state: EmulatedState | None = None) -> dict[str, np.ndarray]:
        """One call. A stateful program reads and writes ``state`` (made by ``make_state``; a fresh zeroed
        one if not given, as for a program without state)."""
        env = self._run_env(inputs, state)
        main = self.program.main
        names = self.program.output_names if len(self.program.output_names) == len(main.outputs) else main.outputs
        return {
            name: to_numpy(env[var], self.types[var].dtype if var in self.types else None)
            for name, var in zip(names, main.outputs)
        }

    def values(self, inputs: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
        """The values of the named variables of the main block (intermediate ones too) for ``inputs``;
        names the program does not compute (or computes only inside nested blocks) are left out."""
        env = self._run_env(inputs)
        return {name: to_numpy(env[name], self.types[name].dtype if name in self.types else None)
                for name in names if name in env and isinstance(env[name], torch.Tensor)}

    def run_observed(self, inputs: dict[str, np.ndarray], observe: Observer) -> dict[str, Any]:
        """One call with ``observe(step, env, outputs)`` after each op of the main block: every intermediate
        stays in the returned env (variable name -> torch value), and an observer that returns a list has it
        stored instead of the op's outputs (error localization swaps in another program's values here)."""
        return self._run_env(inputs, observe=observe)

    def run_step(self, step: _Step, env: dict[str, Any]) -> list[Any]:
        """One op of this program on the values in ``env`` (by this program's variable names), stored as
        the program stores them."""
        return self._execute(step, env)

    def _run_env(self, inputs: dict[str, np.ndarray], state: EmulatedState | None = None,
                 observe: Observer | None = None) -> dict[str, Any]:
        env: dict[str, Any] = dict(self.constants)
        state = state if state is not None else self.make_state()
        for name, _info in self.program.states:
            if name not in state:
                raise ValueError(f"the state passed has no {name!r} (it has {', '.join(state) or 'none'})")
            env[name] = state[name]
        expected = self.program.input_names
        unknown = sorted(set(inputs) - set(expected))
        missing = [n for n in expected if n not in inputs]
        if unknown or missing:
            raise ValueError(f"inputs must be exactly {', '.join(expected)}"
                             + (f"; missing {', '.join(missing)}" if missing else "")
                             + (f"; unknown {', '.join(unknown)}" if unknown else ""))
        for name, info in self.program.inputs:
            if info.kind == "state":
                continue
            array = np.asarray(inputs[name])
            if array.ndim == 0 and info.shape == (1,):  # coremltools declares a scalar input as shape [1]
                array = array.reshape(1)
            if info.shape is not None and None not in info.shape and tuple(array.shape) != info.shape:
                raise ValueError(f"input {name!r} has shape {list(array.shape)}, the program declares {list(info.shape)}")
            declared = "fp32" if info.dtype == "fp16" and self.precision == "float32" else info.dtype
            np_dtype = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "bool": np.bool_}.get(declared or "")
            if np_dtype is not None:
                array = array.astype(np_dtype)
            env[name] = store(from_numpy(array), info.dtype, self.precision)
        with torch.no_grad():
            self._run_block(self.steps, env, observe)
        return env

    def _run_block(self, steps: list[_Step], env: dict[str, Any], observe: Observer | None = None) -> None:
        for step in steps:
            values = self._execute(step, env)
            if observe is not None:
                values = observe(step, env, values) or values
            for (name, _dtype), value in zip(step.outputs, values):
                env[name] = value

    def _execute(self, step: _Step, env: dict[str, Any]) -> list[Any]:
        kwargs: dict[str, Any] = {}
        for key, refs, as_list in step.args:
            values = [env[n] if n is not None else v for n, v in refs]
            kwargs[key] = values if as_list else values[0]
        op = step.op
        try:
            if op.type == "cond":
                result = self._cond(step, env, kwargs)
            elif op.type == "while_loop":
                result = self._while_loop(step, env, kwargs)
            else:
                result = step.kernel.fn(**kwargs)  # type: ignore[union-attr]
        except (UnsupportedOps, EmulationError):
            raise
        except Exception as exc:  # a kernel's numpy error of any type names the op that failed
            raise EmulationError(f"op {op.raw_type} ({op.name or step.outputs[0][0]}) failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
        results = list(result) if isinstance(result, tuple) else [result]
        if len(results) != len(step.outputs):
            raise EmulationError(f"op {op.raw_type} ({op.name}) returned {len(results)} values, "
                                 f"declares {len(step.outputs)}")
        return self._store(step, results)

    def _store(self, step: _Step, results: list[Any]) -> list[Any]:
        """An op's results as the program keeps them (``precision.store``); ``overflow`` watches here."""
        return [store(v, dtype, self.precision) for v, (_name, dtype) in zip(results, step.outputs)]

    def _block_outputs(self, index: int, step: _Step, env: dict[str, Any]) -> tuple:
        self._run_block(step.blocks[index], env)
        return tuple(env[n] for n in step.op.blocks[index].outputs)

    def _cond(self, step: _Step, env: dict[str, Any], kwargs: dict[str, Any]) -> tuple:
        pred = kwargs["pred"]
        taken = bool(pred.reshape(-1)[0].item()) if isinstance(pred, torch.Tensor) else bool(pred)
        return self._block_outputs(0 if taken else 1, step, env)

    def _while_loop(self, step: _Step, env: dict[str, Any], kwargs: dict[str, Any]) -> tuple:
        values = kwargs["loop_vars"]
        values = list(values)
        cond_block, body_block = step.op.blocks
        for _ in range(_MAX_LOOP_ITERATIONS):
            for (name, _info), value in zip(cond_block.inputs, values):
                env[name] = value
            (keep_going,) = self._block_outputs(0, step, env)
            if not bool(keep_going.reshape(-1)[0].item()):
                return tuple(values)
            for (name, _info), value in zip(body_block.inputs, values):
                env[name] = value
            values = list(self._block_outputs(1, step, env))
        raise EmulationError(f"while_loop ({step.op.name}) ran {_MAX_LOOP_ITERATIONS} iterations without ending")


def _to_torch(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return from_numpy(value)
    if isinstance(value, np.generic):
        return from_numpy(np.asarray(value))
    if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
        return [from_numpy(v) for v in value]
    return value
