"""Eager PyTorch: the baseline every export is compared with."""
