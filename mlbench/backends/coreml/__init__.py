"""Core ML backend: static analysis of saved Core ML packages (analysis.py)."""
