"""The localization section as the reports and `mlbench explain` show it (no torch)."""

from __future__ import annotations

from mlbench.localization import ErrorLocalization, LayerAdvice, ModuleError, OpError, OpOrigin, as_record
from mlbench.records import RunRecord
from mlbench.report.localization import localization_section, render_localization


def _found() -> ErrorLocalization:
    origin = OpOrigin(module="blocks.1.fc", module_type="torch.nn.modules.linear.Linear", op="linear",
                      file="/m/models.py", line=30)
    ops = [OpError(index=0, name="linear_0_cast_fp16", op_type="linear", pairing="name", snr_db=60.0, growth_db=240.0,
                   share=0.01, origin=origin.model_copy(update={"module": "blocks.0.fc"})),
           OpError(index=1, name="linear_1_cast_fp16", op_type="linear", pairing="structure", snr_db=12.0,
                   growth_db=48.0, share=0.93, origin=origin),
           OpError(index=2, name="var_9", op_type="gelu", pairing="unpaired",
                   why_unpaired="no reference gelu op computes from the same inputs (fused or rewritten by conversion)")]
    advice = LayerAdvice(recipe="palettize4", advised_recipe="palettize4_advised", exclude=["blocks.1.fc"],
                         override={"palettize4_advised": {"kind": "palettize", "nbits": 4, "exclude": ["blocks.1.fc"]}},
                         expected_snr_db=35.2, min_snr_db=20.0, kept_saving=0.5, reason="1 module(s) carry 93%")
    return ErrorLocalization(variant="m/coreml/float16/all/palettize4", backend="coreml", reference="the float32 program",
                             source="emulated", samples=1, seconds=2.5, output_snr_db=11.0, first_jump=1, ops=ops,
                             modules=[ModuleError(module="blocks.1.fc", where="models.py:30", ops=1, share=0.93,
                                                  snr_db=12.0, weight_bytes_saved=6144)], advice=advice)


def test_the_section_leads_with_the_first_jump_and_the_top_contributors():
    text = "\n".join(render_localization(_found()))
    assert ("**First op where the error jumps:** `blocks.1.fc (models.py:30)` (linear `linear_1_cast_fp16`): "
            "SNR 12.0 dB, 48.0 dB lost over its inputs.") in text
    top = text.index("**Top ops by contribution**")
    assert text.index("| `blocks.1.fc` | models.py:30 | linear | `linear_1_cast_fp16` | 12.0 | 48.0 | 93% |") > top
    assert "- `var_9` (gelu): no reference gelu op computes from the same inputs" in text
    assert "```yaml\noptimizations:\n  palettize4_advised:\n    kind: palettize\n    nbits: 4\n    exclude: [blocks.1.fc]\n```" in text
    assert "took 2.5 s" in text


def test_reports_fold_one_section_per_localized_record_and_say_why_one_failed():
    common = {"model": "m", "backend": "coreml", "axes": {}, "artifact_id": "a", "started": "t", "seconds": 1.0}
    records = [RunRecord(variant_id="m/a", status="failed", details={"localization": as_record(_found())}, **common),
               RunRecord(variant_id="m/b", status="ok", details={"localization_error": "EmulationError: op x failed"},
                         **common),
               RunRecord(variant_id="quiet/variant", status="ok", **common)]
    lines = localization_section(records)
    assert lines[0] == ("<details><summary>Where m/a loses accuracy: first jump at blocks.1.fc (models.py:30) "
                        "(2.5 s)</summary>")
    assert "</details>" in lines
    assert "_m/b: its error could not be localized: EmulationError: op x failed_" in lines
    assert not any("quiet/variant" in line for line in lines)
