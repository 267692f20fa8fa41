"""mlbench: benchmark machine-learning models for on-device deployment, Core ML first."""

__version__ = "0.1.0"
