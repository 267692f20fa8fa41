"""The ground floor: what a backend publishes about itself (`spec`) and the registry that reads those
publications from the `mlbench.backends` entry points (`registry`).

Everything above reads backends through these two modules and never imports a backend's package:
config builds its target union from the registry, reports and compare learn devices and metric families
from it, the CLI adds each backend's commands from it. This package imports nothing of mlbench but
`errors`, so every room may stand on it.
"""
