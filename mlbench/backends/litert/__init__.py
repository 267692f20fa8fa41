"""LiteRT (formerly TensorFlow Lite): litert-torch exports, ai-edge-litert measures on the CPU (XNNPACK)."""
