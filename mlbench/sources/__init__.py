"""Model sources: how a pipeline's `models:` entries become PyTorch modules with seeded inputs."""
