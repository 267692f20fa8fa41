"""`mlbench inspect PACKAGE --against REFERENCE`: localization of two packages on seeded inputs, without a
pipeline (no eager PyTorch, no advice: those need the model and its recipe)."""

from __future__ import annotations

import json
from pathlib import Path

from mlbench.errors import UserError

__all__ = ["inspect_against"]


def inspect_against(path: Path, reference: Path, seed: int, *, as_json: bool = False) -> int:
    from mlbench.backends.coreml.emulate import Emulator, UnsupportedOps
    from mlbench.backends.coreml.localize.programs import localize_programs
    from mlbench.backends.coreml.origins import package_origins
    from mlbench.backends.coreml.seeded_inputs import readable_program, seeded_feeds
    from mlbench.report.localization import render_localization

    if not reference.exists():
        raise UserError("the reference package is not there", file=reference)
    program, ref_program = readable_program(path), readable_program(reference)
    if program.input_names != ref_program.input_names:
        raise UserError(f"its inputs ({', '.join(program.input_names)}) are not the reference's "
                        f"({', '.join(ref_program.input_names)})", file=path)
    try:
        found = localize_programs(Emulator(program), Emulator(ref_program), [seeded_feeds(ref_program, seed, path)],
                                  origins=package_origins(path), variant_id=path.name, backend="coreml",
                                  reference_label=f"{reference.name}, emulated (seed {seed})")
    except UnsupportedOps as exc:
        raise UserError(f"cannot localize: the interpreter lacks {', '.join(exc.ops)}", file=path) from None
    if as_json:
        print(json.dumps(json.loads(found.model_dump_json()), indent=2))
    else:
        print("\n".join(render_localization(found, heading="###")))
    return 0
