"""A sweep's Core ML variant localized: its reference (the same model's float32 program without
compression) exported through the artifact cache like any variant, both run on the pipeline's seeded
inputs, the modules' weight savings read, advice given for a compressed variant, and the module outputs
compared with eager PyTorch."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from mlbench.backends.coreml.localize.programs import LocalizeOptions, localize_programs
from mlbench.config.base import NO_OPTIMIZATION
from mlbench.localization import ErrorLocalization

if TYPE_CHECKING:
    from mlbench.matrix import Variant
    from mlbench.sources.loading import LoadedModel

__all__ = ["localize_variant", "reference_variant"]


def reference_variant(variant: Variant) -> Variant:
    """The same variant at float32 without compression: what its program is compared with."""
    axes = tuple((k, "float32" if k == "precision" else NO_OPTIMIZATION if k == "optimize" else v)
                 for k, v in variant.axes)
    return dataclasses.replace(variant, axes=axes)


def localize_variant(backend: Any, model: LoadedModel, variant: Variant, *,
                     options: LocalizeOptions | None = None, eager: bool = True) -> ErrorLocalization:
    """The variant's ErrorLocalization (raises what the export or the interpreter raises)."""
    from mlbench.backends.coreml.emulate import Emulator, load_program
    from mlbench.backends.coreml.emulated_verify import package_feeds
    from mlbench.backends.coreml.localize.advice import advise
    from mlbench.backends.coreml.localize.weights import module_savings, saved_bytes, weight_readers
    from mlbench.backends.coreml.origins import package_origins
    from mlbench.backends.coreml.target import recipe_dict

    started = time.perf_counter()
    reference = reference_variant(variant)
    package = backend.export(model, variant).payload.package
    alternative = model.alternative(variant.shape)
    samples = [model.sample(i, alternative)[0] for i in range(backend.config.verify.samples)]
    feeds = [package_feeds(model, inputs) for inputs in samples]
    origins = package_origins(package)
    program = load_program(package)
    weights = module_savings(program, origins)
    savings = {module: saved_bytes(weights, [module]) for module in weights}
    options = options or LocalizeOptions()
    options.modules = sorted(savings, key=lambda m: -savings[m])[: options.budget]
    variant_emulator = Emulator(program)
    if reference == variant:  # a float32 program without compression: only eager can say more
        found = localize_programs(variant_emulator, variant_emulator, feeds[:1], origins=origins,
                                  variant_id=variant.id, backend="coreml", reference_label="itself", options=options)
        found.notes.insert(0, "a float32 program without compression is its own reference: see the module outputs "
                           "against eager PyTorch")
    else:
        ref_package = backend.export(model, reference).payload.package
        found = localize_programs(variant_emulator, Emulator(load_program(ref_package)), feeds, origins=origins,
                                  variant_id=variant.id, backend="coreml",
                                  reference_label=f"{reference.id} (float32, uncompressed), emulated", options=options)
    for module in found.modules:
        module.weight_bytes_saved = savings.get("" if module.module == "(model)" else module.module)
    recipe_name = variant.axis("optimize") if "optimize" in dict(variant.axes) else NO_OPTIMIZATION
    if recipe_name != NO_OPTIMIZATION:
        recipe = recipe_dict(backend.config.optimizations.get(recipe_name), backend.config.optimizations)
        floor = backend.config.verify.min_snr_db_for(variant.axis("precision"), recipe_name)
        found.advice = advise(found, weights, recipe_name, recipe, floor, weight_readers(program, origins))
    if eager and model.has_source:
        found.eager = _eager(variant_emulator, model, samples[0], feeds[0], origins)
    found.seconds = time.perf_counter() - started
    return found


def _eager(emulator: Any, model: LoadedModel, inputs: list, feeds: dict, origins: dict) -> list:
    from mlbench.backends.coreml.localize.programs import _array
    from mlbench.backends.eager_modules import eager_modules

    env = emulator.run_observed(feeds, lambda *_: None)
    values = [(step.op.name, step.outputs[0][0], _array(env.get(step.outputs[0][0]))) for step in emulator.steps]
    return eager_modules(model.torch_module, inputs, values, origins)
