"""A noise-aware performance gate: the statistics (pure functions) and the rules for records.

Two gates, one idea: compare ratios measured in the same run, never absolute numbers measured on
different days or machines; and, where runs cannot be paired (a nightly history), a detector that pools
evidence over runs instead of judging each alone.

1. **Kernel gate** (baseline vs candidate, both timed in one process): time them in interleaved
   pairs, take the median of the per-pair log ratios, and fail the candidate when that median
   ratio exceeds a threshold set from the *measured* noise of an A/A calibration (the baseline
   against itself): threshold = exp(z * SE), SE = 1.2533 * sigma / sqrt(k) (the standard error of
   a median of k normal draws), sigma = 1.4826 * MAD of the A/A log ratios (a robust standard
   deviation), never below a floor of 2%. The number of pairs k is chosen so that the threshold
   sits at half the smallest regression the gate must catch.
2. **Record gate** (one result record, optionally against a baseline record): the project's publication
   gate passes (records/plausibility.py: no rate above its datasheet peak, a commit, checks); every check passed;
   every fraction of a same-run ceiling at most 1; the ceiling's two samples (start and end of the
   run) close enough that the run was quiet (the publication gate's own rule, so a noisy run is
   quarantined: blocked here, refused by the check); and, against a baseline, each metric's fraction of
   its ceiling (which does not depend on the GPU model the way an absolute GB/s does) not lower by
   more than the block threshold.
3. **Change points in a history** (nightly runs, one point each): a one-sided CUSUM
   of each run standardised by the A/A noise of the history's first runs, its runs clipped so no one run adds
   more than the cap (which lets the decision level be set lower); where it says the shift began; and the false-alarm / miss / delay bookkeeping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from records import plausibility

MEDIAN_SE = 1.2533  # sqrt(pi / 2): SE of the median over SE of the mean, normal data
MAD_TO_SIGMA = 1.4826  # 1 / Phi^-1(3/4): a normal distribution's sigma over its median absolute deviation


def robust_sigma(log_ratios) -> float:
    x = np.asarray(log_ratios, dtype=float)
    return float(MAD_TO_SIGMA * np.median(np.abs(x - np.median(x))))


def pairs_needed(sigma: float, smallest_regression: float, z: float, k_min: int = 10, k_max: int = 200) -> int:
    """Fewest pairs k whose threshold exp(z * SE) stays at or below half the regression to catch."""
    half = math.log(1 + smallest_regression) / 2
    k = math.ceil((z * MEDIAN_SE * sigma / half) ** 2) if sigma > 0 else k_min
    return max(k_min, min(k_max, k))


def threshold(sigma: float, k: int, z: float, floor: float = 1.02) -> float:
    """exp(z * SE of the median log ratio), but never below ``floor``: a GPU's A/A noise can be a fraction of
    a percent, and a gate that fails a 0.5% difference fails on effects (clock, placement) nobody can act on."""
    return max(math.exp(z * MEDIAN_SE * sigma / math.sqrt(k)), floor)


def gate_ratio(base_times, cand_times) -> float:
    """Candidate over baseline: exp of the median of per-pair log ratios (pairs adjacent in time)."""
    logs = np.log(np.asarray(cand_times, dtype=float)) - np.log(np.asarray(base_times, dtype=float))
    return float(math.exp(np.median(logs)))


def blocks(ratio: float, limit: float) -> bool:
    return ratio > limit


# -- the record gate ---------------------------------------------------------------------------------
PASS, WARN, BLOCK = "pass", "warn", "block"


@dataclass(frozen=True)
class Finding:
    verdict: str  # pass | warn | block
    rule: str
    detail: str


ceiling_drift = plausibility.ceiling_drift  # the publication gate's rule: one owner


def gate_record(rec: dict, baseline: dict | None = None, *, drift_max: float, warn_drop: float,
                block_drop: float) -> list[Finding]:
    """Findings for one record; a record blocks if any finding blocks. ``warn_drop``/``block_drop``
    are fractional drops of a metric's fraction-of-ceiling against the baseline (0.05 = 5%)."""
    findings = []
    # first the project's own publication gate (records/plausibility.py: datasheet peaks, a fraction above
    # its ceiling beyond its device's margin, failed or missing checks, no commit), as the check and the GPU unpacker apply it
    problems = plausibility.vet(rec, "record")
    findings.append(Finding(BLOCK if problems else PASS, "publishable",
                            "; ".join(p.removeprefix("record: ") for p in problems[:2]) if problems
                            else "the project's publication gate passes"))
    failed = [c["name"] for c in rec.get("checks", []) if not c.get("passed")]
    findings.append(Finding(BLOCK if failed else PASS, "checks",
                            f"{len(failed)} failed: {', '.join(failed[:3])}" if failed
                            else f"{len(rec.get('checks', []))} passed"))
    over = {n: m["fraction_of_ceiling"] for n, m in rec["metrics"].items() if m.get("fraction_of_ceiling", 0) > 1}
    with_ceiling = sum("fraction_of_ceiling" in m for m in rec["metrics"].values())
    findings.append(Finding(BLOCK if over else PASS, "fraction <= 1",
                            "; ".join(f"{n} = {v:.2f} of its ceiling: the ceiling or the timing is wrong"
                                      for n, v in list(over.items())[:3]) if over
                            else f"{with_ceiling} metric(s) with a ceiling, all at most 1"))
    drift = ceiling_drift(rec)
    noisy = {n: d for n, d in drift.items() if d > drift_max}
    findings.append(Finding(BLOCK if noisy else PASS, "quiet run",
                            "; ".join(f"{n} samples differ {d:.2f}x: quarantine, re-run" for n, d in noisy.items())
                            if noisy else (f"ceiling samples within {max(drift.values()):.2f}x" if drift
                                           else "no second ceiling sample")))
    if baseline is not None:
        for name, m in rec["metrics"].items():
            b = baseline["metrics"].get(name)
            if b is None or "fraction_of_ceiling" not in m or "fraction_of_ceiling" not in b:
                continue
            change = m["fraction_of_ceiling"] / b["fraction_of_ceiling"] - 1
            verdict = BLOCK if change < -block_drop else WARN if change < -warn_drop else PASS
            findings.append(Finding(verdict, f"vs baseline: {name}",
                                    f"{b['fraction_of_ceiling']:.3f} -> {m['fraction_of_ceiling']:.3f} of "
                                    f"{m['ceiling']} ({change:+.1%}; {baseline['device_class']} -> {rec['device_class']})"))
    return findings


def overall(findings: list[Finding]) -> str:
    verdicts = {f.verdict for f in findings}
    return BLOCK if BLOCK in verdicts else WARN if WARN in verdicts else PASS


# -- change points in a performance history ----------------------------------------------------------------
def standardise(history: np.ndarray, reference: int) -> tuple[np.ndarray, np.ndarray]:
    """Each history (one per row, log latency per run) against its own first ``reference`` runs, the A/A runs of
    unchanged code: returns (the later runs' log ratio to the reference median, the reference's robust sigma)."""
    ref = history[:, :reference]
    centre = np.median(ref, axis=1, keepdims=True)
    sigma = np.maximum(MAD_TO_SIGMA * np.median(np.abs(ref - centre), axis=1), 1e-12)
    return history[:, reference:] - centre, sigma


def cusum(z: np.ndarray, k, clip=None) -> np.ndarray:
    """One-sided (upward) CUSUM per row of standardised runs: S_t = max(0, S_(t-1) + z_t - k), k half the shift to
    detect (one number, or one per row). ``clip`` (one number, or one per row) caps each run at +-clip, so one
    outlier run adds at most the cap (a robust CUSUM); None leaves the runs as they are."""
    if clip is not None:
        c = np.asarray(clip, dtype=float).reshape(-1, 1)
        z = np.clip(z, -c, c)
    s, out = np.zeros(z.shape[0]), np.empty_like(z)
    for t in range(z.shape[1]):
        s = np.maximum(0.0, s + z[:, t] - k)
        out[:, t] = s
    return out


def alarm_rates(alarms: np.ndarray, change: int) -> tuple[float, float, np.ndarray]:
    """Alarms per run (rows: histories) with a step at column ``change``: (false-alarm rate, the share of histories
    that alarm before the step; miss rate, the share with no alarm from the step on; each detected history's delay,
    runs from the step to its first alarm there)."""
    after = alarms[:, change:]
    detected = after.any(axis=1)
    return float(alarms[:, :change].any(axis=1).mean()), float(1 - detected.mean()), np.argmax(after, axis=1)[detected]


def cusum_start(stat: np.ndarray, alarm_at: int) -> int:
    """Where a CUSUM that alarmed at ``alarm_at`` says the shift began: the run after its statistic was last 0."""
    zeros = np.flatnonzero(stat[:alarm_at] == 0)
    return int(zeros[-1] + 1) if zeros.size else 0
