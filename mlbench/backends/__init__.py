"""Backends: one folder each (target model, backend class, export, its own report sections), found
through the registry (`mlbench.plugins.registry`), never named by the core."""
