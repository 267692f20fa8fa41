"""MLComputePlan with coremltools 8's shape: model_structure.program.functions[name].block.operations,
device usage and estimated cost per operation. Its content and misbehaviour come from the scenario."""

import os
import sys
import time
from types import SimpleNamespace

from coremltools._scenario import log, scenario
from coremltools.models.compute_device import MLCPUComputeDevice, MLGPUComputeDevice, MLNeuralEngineComputeDevice

DEVICES = {"cpu": MLCPUComputeDevice, "gpu": MLGPUComputeDevice, "neural_engine": MLNeuralEngineComputeDevice}


def _operation(spec: dict) -> SimpleNamespace:
    return SimpleNamespace(
        operator_name=spec["operator"],
        outputs=[SimpleNamespace(name=name) for name in spec.get("outputs", [])],
        blocks=[SimpleNamespace(operations=[_operation(op) for op in block]) for block in spec.get("blocks", [])],
        spec=spec,
    )


class MLComputePlan:
    def __init__(self, program) -> None:
        self.model_structure = SimpleNamespace(program=program)

    @classmethod
    def load_from_path(cls, path, compute_units=None):
        plan = scenario()
        log("load_from_path", path=str(path), compute_units=getattr(compute_units, "name", None))
        if str(path).endswith(".mlpackage"):  # what the real API does with a package: the process dies
            os.abort()
        behaviour = plan.get("behaviour", "ok")
        for line in plan.get("stdout", []):  # a library talking on stdout
            print(line, flush=True)
        if behaviour == "crash":
            print("fake MLComputePlan: the compiler service crashed", file=sys.stderr, flush=True)
            os.abort()
        if behaviour == "hang":
            time.sleep(120)
        if behaviour == "vanish":  # the process ends cleanly before anything is written
            os._exit(0)
        if behaviour == "not-program":
            return cls(None)
        functions = {name: SimpleNamespace(block=SimpleNamespace(operations=[_operation(op) for op in ops]))
                     for name, ops in plan["functions"].items()}
        return cls(SimpleNamespace(functions=functions))

    def get_compute_device_usage_for_mlprogram_operation(self, operation):
        spec = operation.spec
        if spec.get("preferred") is None:
            return None
        return SimpleNamespace(preferred_compute_device=DEVICES[spec["preferred"]](),
                               supported_compute_devices=[DEVICES[d]() for d in spec.get("supported", [])])

    def get_estimated_cost_for_mlprogram_operation(self, operation):
        cost = operation.spec.get("cost")
        return None if cost is None else SimpleNamespace(weight=cost)
