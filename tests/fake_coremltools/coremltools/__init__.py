"""Fake coremltools for the compute-plan child's tests (see tests/fake_coremltools/README.md)."""

import enum


class ComputeUnit(enum.Enum):
    ALL = 1
    CPU_AND_GPU = 2
    CPU_ONLY = 3
    CPU_AND_NE = 4
