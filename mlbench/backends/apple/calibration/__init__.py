"""Calibration of the Core ML estimates on the team's own measured Mac runs (`mlbench calibrate`).

``profile``: the profile file (pydantic; YAML reviewed in PRs) and how an estimate picks its parameters
and error band (a user profile, else the shipped per-chip fit, else the priors of an uncalibrated chip).
``signature``: the op signature placement observations are keyed by, and applying them to an estimate.
``fitting``: the least-squares fit with its determinability checks and leave-one-out, shared with
``benchmarks/calibrate_latency.py``. ``measured``: measured records read from reports or the history.
``run``: the calibrate command's Python API; ``cli``: its thin command line.
"""
