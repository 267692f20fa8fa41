"""ONNX Runtime backend: torch.onnx export (cached), sessions on any provider, placement from profiling."""
