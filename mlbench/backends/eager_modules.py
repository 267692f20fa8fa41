"""Module outputs of an exported program against eager PyTorch's, by forward hooks (every backend that localizes).

A module's output in the program is the value of its last op (program order) converted from it or from
a module under it, when that value has the size of the module's first tensor output. A module called
more than once (a shared activation) is left out: its hook cannot say which call an op stands for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlbench.localization import EagerModule, ErrorSum, OpOrigin, growth_db

__all__ = ["eager_modules"]


def _first_tensor(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        for item in value:
            found = _first_tensor(item)
            if found is not None:
                return found
    if isinstance(value, dict):
        return _first_tensor(list(value.values()))
    return None


def eager_outputs(module: Any, inputs: list[Any]) -> list[tuple[str, np.ndarray]]:
    """(module path, its first tensor output) in call order, modules called once only."""
    import torch

    from mlbench.backends.source_frames import module_path, wrapper_prefix

    calls: dict[str, list[np.ndarray]] = {}
    order: list[str] = []
    handles = []
    prefix = wrapper_prefix(module)
    for full_name, sub in module.named_modules():
        name = module_path(full_name, prefix)
        if not name:
            continue

        def hook(_m: Any, _args: Any, output: Any, name: str = name) -> None:
            tensor = _first_tensor(output)
            if tensor is not None:
                if name not in calls:
                    order.append(name)
                calls.setdefault(name, []).append(tensor.detach().cpu().to(torch.float64).numpy())

        handles.append(sub.register_forward_hook(hook))
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    return [(name, calls[name][0]) for name in order if len(calls[name]) == 1]


def eager_modules(module: Any, inputs: list[Any], program_values: list[tuple[str, str, Any]],
                  origins: dict[str, OpOrigin]) -> list[EagerModule]:
    """Per module: the SNR of the program's value for its output against eager's. ``program_values`` are
    (op name, output name, value as numpy) in program order."""
    found: list[EagerModule] = []
    previous: float | None = None
    for path, expected in eager_outputs(module, inputs):
        standing = None
        for op_name, output, value in program_values:
            origin = origins.get(op_name) or origins.get(output)
            if origin is None or not (origin.module == path or origin.module.startswith(path + ".")):
                continue
            if value is not None and np.size(value) == expected.size:
                standing = (output, value)
        if standing is None:
            continue
        sums = ErrorSum()
        sums.add(standing[1], expected)
        snr = sums.snr_db
        growth = growth_db([previous], snr)  # the first module's input is exact
        found.append(EagerModule(module=path, op=standing[0], snr_db=snr, growth_db=growth))
        previous = snr
    return found
