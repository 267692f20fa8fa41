"""Core AI backend: torch.export → coreai-torch → a `.aimodel` asset, compressed by coreai-opt, verified by
Core AI's bundled CPU reference runtime (any Linux x86_64 with the wheels), measured on macOS 27."""
