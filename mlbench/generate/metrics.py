"""The figures of a generative variant, the same for every backend: prefill and decode latency, tokens per
second, the key/value cache's bytes, and how far greedy generation stays from eager float32's.

A backend times prefill (the prompt → the first token's logits) and each decode step (one token against
the cache), then calls `generative_metrics`; it verifies with `verify_generation`, given eager's
`GreedyTrace` for the same prompt (`mlbench.generate.reference`) and its own.

Verification decodes *eager's* tokens (teacher forcing): every step's logits then answer the same
question, so the logits error is comparable at each step, and one early disagreement does not make every
later step disagree. `verify.token_agreement` is the share of steps (prefill's and each decode step's)
whose greedy token, the arg-max of the logits, equals eager's; `verify.logits_max_rel` the largest
max_rel of the logits over the steps (`mlbench.verify`'s measure: error over max(scale, 1)).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlbench.records import Metric, Source, Verification
from mlbench.stability import Stability

if TYPE_CHECKING:
    import numpy as np

PREFILL = "latency.prefill"
DECODE = "latency.decode"
TOKENS_PER_S = "tokens_per_s.decode"
KV_CACHE = "memory.kv_cache"
TOKEN_AGREEMENT = "verify.token_agreement"
LOGITS_MAX_REL = "verify.logits_max_rel"
ESTIMATED_PREFILL = "latency.estimated.prefill."
ESTIMATED_DECODE = "latency.estimated.decode."
GENERATIVE_METRICS = (PREFILL, DECODE, TOKENS_PER_S, KV_CACHE, TOKEN_AGREEMENT, LOGITS_MAX_REL)
"""Every generative metric a record can carry (besides the per-chip estimates), in display order."""

LOGITS = "logits"
"""The output name a generation's verification reports (each step's last-position logits)."""


@dataclass(frozen=True)
class GreedyTrace:
    """One greedy generation: the token chosen at each step and the logits it was chosen from.

    Step 0 is prefill's (the logits at the prompt's last position); step k ≥ 1 is the k-th decode step's.
    `new_tokens` decode steps make `new_tokens + 1` rows."""

    prompt: list[int]
    tokens: list[int]
    logits: np.ndarray  # [steps, vocab], float32

    @property
    def steps(self) -> int:
        return len(self.tokens)

    def fed_tokens(self) -> list[int]:
        """The tokens decode steps take, in order: every chosen token but the last (teacher forcing feeds
        these to a backend under verification)."""
        return self.tokens[:-1]


def _sampled(name: str, value: float | Sequence[float], unit: str, source: Source,
             stability: Stability | None) -> tuple[Metric, float]:
    if isinstance(value, (int, float)):
        return Metric(value=float(value), unit=unit, source=source), float(value)
    samples = [float(v) for v in value]
    if not samples:
        raise ValueError(f"{name}: no samples")
    middle = statistics.median(samples)
    return Metric(value=middle, unit=unit, source=source, samples=samples, stability=stability), middle


def generative_metrics(
    *,
    prefill_ms: float | Sequence[float] | None = None,
    decode_ms: float | Sequence[float] | None = None,
    kv_cache_bytes: float | None = None,
    token_agreement: float | None = None,
    logits_max_rel: float | None = None,
    source: Source = "measured",
    kv_source: Source = "measured",
    verify_source: Source = "measured",
    absent: Mapping[str, str] | None = None,
    prefill_stability: Stability | None = None,
    decode_stability: Stability | None = None,
) -> dict[str, Metric]:
    """The generative metrics of one variant.

    `prefill_ms`: each timed prefill (or one figure); `decode_ms`: each timed decode step in ms (or one figure
    per token); a list's median is the metric's value and the list is kept as its raw samples (compare's noise
    guard reads them). `source` is the timings' origin, `kv_source` the cache size's (the cache tensors a
    runtime holds: measured; computed from the model's shapes: estimated), `verify_source` the verification's.
    `absent` gives the reason for each metric that could not be had (a name: why). `prefill_stability` and
    `decode_stability`: the timings' grades (`mlbench.stability`), carried by their metrics (tokens/s shares
    decode's)."""
    metrics: dict[str, Metric] = {}
    if prefill_ms is not None:
        metrics[PREFILL], _ = _sampled(PREFILL, prefill_ms, "ms", source, prefill_stability)
    if decode_ms is not None:
        metrics[DECODE], per_token = _sampled(DECODE, decode_ms, "ms", source, decode_stability)
        if per_token > 0:  # the decode steps' samples behind it too: the noise guard tests them either way
            metrics[TOKENS_PER_S] = Metric(value=1000.0 / per_token, unit="tokens/s", source=source,
                                           samples=metrics[DECODE].samples, stability=metrics[DECODE].stability)
    if kv_cache_bytes is not None:
        metrics[KV_CACHE] = Metric(value=float(kv_cache_bytes), unit="bytes", source=kv_source)
    if token_agreement is not None:
        metrics[TOKEN_AGREEMENT] = Metric(value=token_agreement, unit="ratio", source=verify_source)
    if logits_max_rel is not None:
        metrics[LOGITS_MAX_REL] = Metric.figure(logits_max_rel, "rel", verify_source,
                                                why_not_finite="the logits hold inf or nan")
    units = {PREFILL: "ms", DECODE: "ms", TOKENS_PER_S: "tokens/s", KV_CACHE: "bytes", TOKEN_AGREEMENT: "ratio",
             LOGITS_MAX_REL: "rel"}
    for name, why in (absent or {}).items():
        if name not in metrics:
            metrics[name] = Metric.absent(units.get(name, "ms"), why)
            if name == DECODE and TOKENS_PER_S not in metrics:
                metrics[TOKENS_PER_S] = Metric.absent("tokens/s", why)
    return metrics


def estimated_metrics(chip: str, *, prefill_ms: float | None, decode_ms: float | None,
                      band: Any = None) -> dict[str, Metric]:
    """`latency.estimated.prefill.<chip>` and `latency.estimated.decode.<chip>` (ms per token) of an estimate."""
    metrics: dict[str, Metric] = {}
    for prefix, value in ((ESTIMATED_PREFILL, prefill_ms), (ESTIMATED_DECODE, decode_ms)):
        if value is not None:
            metrics[f"{prefix}{chip}"] = Metric(value=value, unit="ms", source="estimated", band=band)
    return metrics


def token_agreement(reference: Sequence[int], actual: Sequence[int]) -> float:
    """Share of steps whose token equals the reference's (over the reference's steps)."""
    if not reference:
        raise ValueError("no reference tokens")
    return sum(1 for r, a in zip(reference, actual) if r == a) / len(reference)


def verify_generation(reference: GreedyTrace, actual: GreedyTrace, *, tolerance: float, min_snr_db: float,
                      reference_name: str, source: Source = "measured") -> Verification:
    """`actual` (a backend's generation over eager's tokens) judged against eager's `reference`: every step's
    logits as one output of `steps` rows, so max_rel is the worst step's, the SNR is over every step, and
    top-1 agreement is the token agreement. Passed as any verification passes (tolerance, SNR floor, no
    decisively moved token)."""
    import numpy as np

    from mlbench.verify import compare_samples

    if actual.steps != reference.steps:
        raise ValueError(f"the generation made {actual.steps} steps; eager made {reference.steps}")
    ref = np.asarray(reference.logits, dtype=np.float32).reshape(reference.steps, -1)
    got = np.asarray(actual.logits, dtype=np.float32).reshape(actual.steps, -1)
    verification = compare_samples([([(LOGITS, ref)], [got])], tolerance=tolerance, min_snr_db=min_snr_db,
                                   reference_name=reference_name, source=source,
                                   method="greedy generation over eager's tokens (teacher forcing), "
                                   f"{reference.steps} steps' logits")
    agreement = token_agreement(reference.tokens, actual.tokens)
    return verification.model_copy(update={"top1_agreement": agreement})


def verification_metrics(verification: Verification) -> dict[str, Metric]:
    """`verify.token_agreement` and `verify.logits_max_rel` of a generation's verification."""
    return generative_metrics(token_agreement=verification.top1_agreement, logits_max_rel=verification.max_rel,
                              verify_source=verification.source)
