# %% [markdown]
# # A noise-aware regression gate, and its measured error rates
#
# A performance CI gate answers one question: is the candidate slower than the baseline, by more
# than the noise? Two habits make the answer trustworthy:
#
# - **ratios inside one run**: baseline and candidate are timed in the same process, interleaved
#   call by call, so anything that drifts (other processes, clocks, thermals) hits both alike;
# - **a threshold from the measured noise**: an A/A calibration (the baseline against itself)
#   measures how much the ratio moves when nothing changed, and sets the threshold and the number
#   of repeats from that.
#
# Then the gate is itself measured: how often it fails an unchanged kernel (false alarm), and how
# often it passes a kernel made 10% slower by 10% more work (miss). The second half applies the
# same idea to result records: this project's CPU records, and a GPU-shaped fixture record. The last part
# turns to nightly histories, one run per build: a change-point detector (CUSUM) against per-run
# thresholds, on synthetic histories with this machine's run-to-run noise.

# %%
import json

import numpy as np
import torch

from demos.harness.run import start
from demos.t10_benchmarking import _gate
from records import plausibility
from records.inputs import declare

# The gate reads every other demo's CPU record (so it runs last in a regeneration, and judges that
# generation) and one GPU-shaped fixture.
FIXTURE = "tests/fixtures/t10_gate_h100.json"
INPUTS = declare(records=["*/cpu"], files=["tests/fixtures/t10_gate_h100.json"], datasheets=["*"])  # the gate
# bounds rates by the datasheets (records/plausibility.py), so they are inputs too

run = start(
    "regression_gate",
    title="A noise-aware regression gate: false-alarm and miss rates measured, applied to records",
    sizes={  # (elements the baseline kernel processes, trials per error rate, A/A calibration pairs)
        "tiny": (2**16, 20, 40),
        "small": (2**18, 60, 100),
        "full": (2**26, 60, 100),
    },
    cpu_threads=1,
)
n, trials, calibration_pairs = run.sizes
device = run.torch_device

# %% [markdown]
# ## The kernels
#
# The baseline is `torch.sin` over n elements (written into a preallocated output, so the
# allocator stays out of it). The "unchanged" candidate is the same call through a different
# function object. The "10% slower" candidate is the same kernel over 1.1 n elements: 10% more work,
# so about 10% more time once n is large enough that the per-call cost is small; its true slowdown
# is measured below rather than assumed.

# %%
SMALLEST_REGRESSION = 0.10  # the gate must catch a 10% slowdown
Z = 3.0  # one-sided: about 0.13% false alarms if the log ratios were normal
x = torch.randn(int(n * (1 + SMALLEST_REGRESSION)), device=device)
out = torch.empty_like(x)
n_slow = x.numel()


def baseline():
    return torch.sin(x[:n], out=out[:n])


def unchanged():
    return torch.sin(x[:n], out=out[:n])


def slower():
    return torch.sin(x[:n_slow], out=out[:n_slow])


for name, fn, m in (("baseline", baseline, n), ("unchanged", unchanged, n), ("slower", slower, n_slow)):
    run.check_close(name, fn()[:m], torch.sin(x[:m].double()), rtol=1e-5, atol=1e-6)

time_one = lambda fn: run.device.time_calls(fn, 1, False)[0]  # noqa: E731  (the harness's per-call timer)


def interleaved(base, cand, k: int) -> tuple[list[float], list[float]]:
    """k pairs, order alternating (AB, BA, AB, ...) so neither always runs first."""
    a, b = [], []
    for i in range(k):
        if i % 2 == 0:
            a.append(time_one(base)), b.append(time_one(cand))
        else:
            b.append(time_one(cand)), a.append(time_one(base))
    return a, b


def sequential(base, cand, k: int) -> tuple[list[float], list[float]]:
    """The tempting alternative: k calls of the baseline, then k of the candidate."""
    return [time_one(base) for _ in range(k)], [time_one(cand) for _ in range(k)]


run.time(baseline)  # warm-up through the harness protocol (and the thread count it records)

# %% [markdown]
# ## Calibration: the A/A noise sets k and the threshold
#
# The baseline against the unchanged copy, in interleaved pairs. The robust spread (1.4826 x the
# median absolute deviation) of the per-pair log ratios is sigma; the gate then uses k pairs, so
# that z standard errors of the median ratio come to half the smallest regression it must catch.
# The threshold never goes below 1.02: on a quiet GPU the A/A noise can be a fraction of a percent,
# and differences that small (clocks, memory placement) are not regressions anyone can act on.

# %%
# Four calibration blocks, spread over a little time; sigma is the median of their four estimates, so a
# burst of load during one block does not set the whole gate (it once made one block's sigma 4x the others).
block_sigmas = []
for _ in range(4):
    a, b = interleaved(baseline, unchanged, calibration_pairs // 4)
    block_sigmas.append(_gate.robust_sigma(np.log(b) - np.log(a)))
sigma = float(np.median(block_sigmas))
run.metric("calibration.sigma_block_spread", max(block_sigmas) / max(min(block_sigmas), 1e-12), "x",
           label="largest over smallest sigma of the four calibration blocks")
k = _gate.pairs_needed(sigma, SMALLEST_REGRESSION, Z, k_max=100)
limit = _gate.threshold(sigma, k, Z)
run.metric("calibration.sigma", sigma, "log ratio", label="robust spread of one pair's log ratio (A/A)")
run.metric("gate.pairs", k, "pairs", label="pairs per gate decision, chosen from sigma")
run.metric("gate.threshold", limit, "x", label="the gate fails a candidate whose median ratio exceeds this")
run.check("threshold_below_regression", limit < 1 + SMALLEST_REGRESSION,
          f"threshold {limit:.3f} < {1 + SMALLEST_REGRESSION:.2f} (else the gate could not see a 10% slowdown)")

# %% [markdown]
# ## The gate, measured: false alarms and misses
#
# Each trial is one gate decision on k fresh pairs. The unchanged candidate should pass every
# time; the slower one should fail every time. The same trials are also scored the tempting way
# (all baseline calls, then all candidate calls; same threshold) to show what interleaving buys.

# %%
results = {}
for label, cand in (("unchanged", unchanged), ("slower", slower)):
    inter, seq = [], []
    for _ in range(trials):
        inter.append(_gate.gate_ratio(*interleaved(baseline, cand, k)))
        seq.append(_gate.gate_ratio(*sequential(baseline, cand, k)))
    results[label] = (np.array(inter), np.array(seq))

false_alarm = float(np.mean(results["unchanged"][0] > limit))
miss = float(np.mean(results["slower"][0] <= limit))
false_alarm_seq = float(np.mean(results["unchanged"][1] > limit))
miss_seq = float(np.mean(results["slower"][1] <= limit))
true_slowdown = float(np.median(results["slower"][0]))
run.metric("gate.false_alarm_rate", false_alarm, "fraction", label=f"unchanged kernel failed, of {trials} trials (interleaved)")
run.metric("gate.miss_rate", miss, "fraction", label=f"10%-slower kernel passed, of {trials} trials (interleaved)")
run.metric("sequential.false_alarm_rate", false_alarm_seq, "fraction", label="the same, timed A-block then B-block")
run.metric("sequential.miss_rate", miss_seq, "fraction", label="the same, timed A-block then B-block")
run.metric("slower.measured_ratio", true_slowdown, "x", label="the 10%-more-work kernel's measured median ratio")
run.metric("unchanged.ratio_p99", float(np.percentile(results["unchanged"][0], 99)), "x",
           label="99th percentile of the unchanged kernel's gate ratio")
for order, r in zip(("interleaved", "sequential"), results["unchanged"]):
    run.metric(f"unchanged.{order}.p99_over_p1", float(np.percentile(r, 99) / np.percentile(r, 1)), "x",
               label=f"unchanged kernel, {order} timing: how wide its gate ratio ranged (p99 over p1)")
# A gate that fails one good change in five, or passes one regression in five, is not usable; the
# rates themselves are the measurement (a z = 3 threshold promises about 0.1% false alarms only if
# the pairs were independent and normal, which a busy machine's load episodes are not).
run.check("detects_regression", miss <= 0.2, f"miss rate {miss:.2f} <= 0.20")
run.check("few_false_alarms", false_alarm <= 0.2, f"false-alarm rate {false_alarm:.2f} <= 0.20")

# Confirming a failure: block only when a re-run (the next trial) fails too. False alarms need two
# failures in a row; a regression now slips through when either run passes.
fails = {lbl: results[lbl][0] > limit for lbl in results}
pairs_of_trials = trials // 2
confirmed_fa = float(np.mean(fails["unchanged"][0:2 * pairs_of_trials:2] & fails["unchanged"][1:2 * pairs_of_trials:2]))
confirmed_miss = float(np.mean(~(fails["slower"][0:2 * pairs_of_trials:2] & fails["slower"][1:2 * pairs_of_trials:2])))
run.metric("confirmed.false_alarm_rate", confirmed_fa, "fraction",
           label="block only if a re-run also fails: unchanged kernel blocked (pairs of trials)")
run.metric("confirmed.miss_rate", confirmed_miss, "fraction",
           label="block only if a re-run also fails: 10%-slower kernel not blocked (pairs of trials)")
run.table("gate", f"Gate decisions: k = {k} pairs each, threshold {limit:.3f}, {trials} trials per row",
          ["candidate", "timing order", "median ratio", "p1-p99 ratio", "failed the gate", "should fail"],
          [[lbl, order, round(float(np.median(r)), 4), f"{np.percentile(r, 1):.3f}-{np.percentile(r, 99):.3f}",
            f"{float(np.mean(r > limit)):.0%}", "yes" if lbl == "slower" else "no"]
           for lbl in results for order, r in zip(("interleaved", "sequential"), results[lbl])])
edges = np.linspace(0.9, 1.25, 36)
false_alarms, misses = int(np.sum(results["unchanged"][0] > limit)), int(np.sum(results["slower"][0] <= limit))
run.series("gate", f"Threshold {limit:.3f}, k = {k} pairs: {false_alarms}/{trials} false alarms, "
           f"{misses}/{trials} misses", "candidate / baseline (median of pairs)",
           "trials", {lbl: (((edges[:-1] + edges[1:]) / 2).tolist(), np.histogram(r[0], edges)[0].tolist())
                      for lbl, r in results.items()}, hlines=None)

# %% [markdown]
# ## The same gate on result records
#
# A record gate cannot time anything again; it reads what the run stored. Its rules (in
# `_gate.gate_record`): the project's own publication gate passes (`records/plausibility.py`, the rules
# `make check` and the GPU unpacker apply: no rate above its datasheet peak, a commit, checks; block);
# every correctness check passed (block); every fraction of a same-run
# ceiling at most 1 (block: a fraction above 1 means the ceiling or the timing is wrong); the
# ceiling's start and end samples within `drift_max` of each other (the publication gate's own bound per device,
# `records/plausibility.py`: what a quiet run of that device shows, 1.25x on a GPU, 1.6x on a shared CPU; block: the run was not quiet, quarantine it and re-run); and, against a baseline record, each metric's fraction of its ceiling
# not down by more than `BLOCK_DROP` (block) or `WARN_DROP` (warn). Fractions, not GB/s: the same
# test then runs on an A100, an H100 or an H200.

# %%
WARN_DROP, BLOCK_DROP = 0.05, 0.10


def policy(device_class: str) -> dict:
    return dict(drift_max=plausibility.drift_max(device_class), warn_drop=WARN_DROP, block_drop=BLOCK_DROP)


rows, drifts, verdicts, repeat_logs = [], [], {}, []
for rec in INPUTS.records("cpu", exclude="regression_gate").values():  # not this demo's own previous record
    findings = _gate.gate_record(rec, **policy("cpu"))
    verdicts[rec["demo"]] = _gate.overall(findings)
    drift = _gate.ceiling_drift(rec)
    repeat_logs += [float(np.log(c["samples"][0] / c["samples"][1])) for c in rec["ceilings"].values()
                    if len(c.get("samples", [])) == 2 and min(c["samples"]) > 0]  # signed: the change-point section
    drifts += list(drift.values())
    worst = max((m.get("fraction_of_ceiling", 0) for m in rec["metrics"].values()), default=0)
    rows.append([rec["demo"], verdicts[rec["demo"]], round(worst, 3) if worst else "",
                 round(max(drift.values()), 2) if drift else "",
                 "; ".join(f.detail for f in findings if f.verdict != _gate.PASS) or "all rules pass"])
run.table("cpu_records", f"The record gate on this project's CPU records (block when ceiling samples differ by "
          f"more than {plausibility.drift_max('cpu')}x)", ["demo", "verdict", "largest fraction of a ceiling", "ceiling drift (x)",
                                        "findings"], rows)
run.metric("records.count", len(rows), "records", label="CPU records gated")
for v in (_gate.PASS, _gate.WARN, _gate.BLOCK):
    run.metric(f"records.{v}", sum(x == v for x in verdicts.values()), "records", label=f"CPU records that {v}")
if drifts:
    run.metric("records.drift_median", float(np.median(drifts)), "x",
               label="median, over CPU records and ceilings, of the larger same-run ceiling sample over the smaller")
    run.metric("records.drift_max", float(max(drifts)), "x", label="largest such ratio")

# %% [markdown]
# **A GPU-shaped fixture** (tests/fixtures/t10_gate_h100.json, marked `"fixture": true`, invented
# numbers, never published as a result) is the baseline; the candidates are derived from it: the
# same kernels on an H200 (memory-bound rates 4.8 / 3.35 higher, its HBM against the H100 SXM's,
# matmul rates unchanged, as it has the same SMs; the same fractions), a regression (one fraction
# down 15%), an impossible result (a fraction above 1), and a noisy run (ceiling samples 40% apart).

# %%
fixture = json.loads(INPUTS.text(FIXTURE))
assert fixture.get("fixture") is True


def variant(device_class: str, bandwidth_scale: float = 1.0, fraction_changes=None, drift=None) -> dict:
    """The fixture as another run: copy bandwidth scaled (another GPU's HBM), fractions changed, drift planted."""
    rec = json.loads(json.dumps(fixture))
    rec["device_class"] = device_class
    c = rec["ceilings"]["copy_bandwidth"]
    c["value"] *= bandwidth_scale
    c["samples"] = [s * bandwidth_scale for s in c["samples"]]
    for name, m in rec["metrics"].items():
        if "fraction_of_ceiling" in m:
            m["fraction_of_ceiling"] *= (fraction_changes or {}).get(name, 1.0)
            m["value"] = m["fraction_of_ceiling"] * rec["ceilings"][m["ceiling"]]["value"]
    if drift:
        c = rec["ceilings"]["copy_bandwidth"]
        c["samples"] = [c["value"], c["value"] / drift]
    return rec


candidates = {
    "same kernels on an H200": (variant("h200", bandwidth_scale=4.8 / 3.35), _gate.PASS),
    "H200, fused LayerNorm chain 15% lower": (variant("h200", 4.8 / 3.35, {"add_ln_gelu.best_fused.gbps": 0.85}), _gate.BLOCK),
    "H100, GEMM 7% lower": (variant("h100", 1.0, {"gemm_4096.tflops": 0.93}), _gate.WARN),
    "H100, a kernel at 1.2x its ceiling": (variant("h100", 1.0, {"bias_relu.best_fused.gbps": 1.2 / 0.9}), _gate.BLOCK),
    "H100, ceiling samples 40% apart": (variant("h100", 1.0, drift=1.4), _gate.BLOCK),
}
fixture_rows = []
for label, (rec, expected) in candidates.items():
    findings = _gate.gate_record(rec, fixture, **policy(rec["device_class"]))
    got = _gate.overall(findings)
    run.check(f"fixture.{label}", got == expected, f"verdict {got}, expected {expected}")
    fixture_rows.append([label, got, "; ".join(f.detail for f in findings if f.verdict != _gate.PASS) or "all rules pass"])
run.table("fixture", "The record gate on a GPU-shaped fixture (baseline: the H100 fixture itself)",
          ["candidate", "verdict", "findings"], fixture_rows)

# %% [markdown]
# ## A performance history: a change-point detector against a per-run threshold
#
# Unless a nightly job also times a pinned reference build beside each new one, each run is one point of a
# history, with the run-to-run noise of the machine. The histories here are synthetic, with noise drawn from this machine: each run's log latency is one
# value resampled from the signed log ratios of the same ceiling measured twice, minutes apart, in the CPU
# records above (a difference of two measurements, so at least as wide as one run's noise; drawn independently,
# so a busy week that slows several runs in a row is not modelled). Each history has `REFERENCE` runs of unchanged
# code (its A/A runs: their median is the baseline, their robust spread its noise floor), then `BEFORE` runs still
# unchanged, then `AFTER` runs 10% slower (the step). Three rules watch the runs after the reference:
#
# - **a fixed 5% rule**: alarm on any run more than 5% slower than the baseline (the record gate's `WARN_DROP`);
# - **a per-run rule calibrated on A/A histories**: alarm on a run more than a threshold slower than the baseline,
#   the threshold set so that at most 5% of histories without a step ever alarm over `BEFORE` runs;
# - **a CUSUM** (Page, 1954) on the standardised runs, k half the step in sigmas, each run clipped at 2 sigma beyond
#   the step (the cap limits what any one run adds, so h can be set lower; the step itself is never clipped), its decision
#   level h calibrated on the same A/A histories to the same 5% (and, to show what the clip buys, the same CUSUM
#   unclipped, calibrated alike).
#
# Calibration and evaluation use different draws. A false alarm is an alarm before the step; a miss, none in the
# `AFTER` runs after it; the delay counts runs from the step to the first alarm.

# %%
REFERENCE, BEFORE, AFTER, HISTORIES, BUDGET = 20, 30, 30, 2000, 0.05
STEP = float(np.log(1 + SMALLEST_REGRESSION))
repeat_logs = np.array(repeat_logs)
rng = np.random.default_rng(run.options.seed)


def histories(step: float) -> np.ndarray:
    x = rng.choice(repeat_logs, size=(HISTORIES, REFERENCE + BEFORE + AFTER))
    x[:, REFERENCE + BEFORE:] += step
    return x


def statistics(x: np.ndarray) -> dict[str, np.ndarray]:
    """Per rule, the statistic it compares with its threshold, per run after the reference."""
    logs, sigma = _gate.standardise(x, REFERENCE)
    z = logs / sigma[:, None]
    return {"fixed 5%": logs, "per-run, calibrated": logs, "CUSUM": _gate.cusum(z, STEP / sigma / 2, STEP / sigma + 2),
            "CUSUM, not clipped": _gate.cusum(z, STEP / sigma / 2)}


calm, stepped = statistics(histories(0.0)), statistics(histories(STEP))
levels = {"fixed 5%": float(np.log(1.05))}
for rule in ("per-run, calibrated", "CUSUM", "CUSUM, not clipped"):  # the A/A histories' 95th percentile of the max
    levels[rule] = float(np.quantile(calm[rule][:, :BEFORE].max(axis=1), 1 - BUDGET))
cp_rows, scores = [], {}
for rule, level in levels.items():
    fa, miss, delays = _gate.alarm_rates(stepped[rule] > level, BEFORE)
    scores[rule] = (fa, miss, float(np.median(delays)) if delays.size else float(AFTER))
    cp_rows.append([rule, f"{level:.3g}", f"{fa:.1%}", f"{miss:.1%}", scores[rule][2]])
run.table("changepoint", f"A 10% step in {HISTORIES} synthetic histories ({REFERENCE} reference runs, step after "
          f"{BEFORE} more; noise resampled from {repeat_logs.size} repeated ceilings of this machine)",
          ["rule", "threshold (log ratio, or CUSUM level in sigmas)", "false alarms (histories)",
           f"misses (no alarm in {AFTER} runs)", "median delay (runs)"], cp_rows)
label = "simulated histories, noise from this machine's repeated ceilings: "
for name, rule in (("fixed_5pct", "fixed 5%"), ("per_run_calibrated", "per-run, calibrated"), ("cusum", "CUSUM")):
    run.metric(f"changepoint.{name}.false_alarm_rate", scores[rule][0], "fraction", origin="computed",
               label=label + f"{rule}, histories with an alarm in {BEFORE} runs before the step")
    run.metric(f"changepoint.{name}.miss_rate", scores[rule][1], "fraction", origin="computed",
               label=label + f"{rule}, histories with no alarm in {AFTER} runs after the step")
run.metric("changepoint.cusum.median_delay", scores["CUSUM"][2], "runs", origin="computed",
           label=label + "CUSUM, median runs from the step to its alarm")
run.metric("changepoint.cusum_unclipped.miss_rate", scores["CUSUM, not clipped"][1], "fraction", origin="computed",
           label=label + "CUSUM with no run clipped, misses")
per_run_alarms = float((stepped["fixed 5%"][:, :BEFORE] > levels["fixed 5%"]).mean())
run.metric("changepoint.fixed_5pct.alarms_per_run", per_run_alarms, "fraction", origin="computed",
           label=label + "fixed 5% rule, runs before the step that alarm")
run.metric("changepoint.noise_sigma", _gate.robust_sigma(repeat_logs), "log ratio",
           label="robust spread of the log ratio of a ceiling measured twice in one run (CPU records)")
run.metric("changepoint.per_run_calibrated.threshold", float(np.exp(levels["per-run, calibrated"])), "x",
           origin="computed", label=label + "per-run rule calibrated to 5% false alarms: a run this much slower alarms")
alarmed = stepped["CUSUM"] > levels["CUSUM"]
clean = np.flatnonzero(~alarmed[:, :BEFORE].any(axis=1) & alarmed[:, BEFORE:].any(axis=1))
errors = [_gate.cusum_start(stepped["CUSUM"][i], BEFORE + int(np.argmax(alarmed[i, BEFORE:]))) - BEFORE for i in clean]
run.metric("changepoint.cusum.start_error", float(np.median(np.abs(errors))), "runs", origin="computed",
           label=label + "CUSUM, median |estimated start - true step| over histories it caught without a false alarm")
example = int(clean[0])
run.series("history", f"One history: 10% slower from run {BEFORE}; the CUSUM alarmed at run "
           f"{BEFORE + int(np.argmax(alarmed[example, BEFORE:]))}", "run (after the reference runs)",
           "latency / baseline", {"latency / baseline": (list(range(BEFORE + AFTER)),
                                                         np.exp(stepped["fixed 5%"][example]).tolist())},
           hlines={"fixed 5% rule": 1.05, "true latency after the step": 1 + SMALLEST_REGRESSION}, computed=True)
run.check("changepoint.cusum_beats_per_run_rule", scores["CUSUM"][1] < scores["per-run, calibrated"][1],
          f"CUSUM misses {scores['CUSUM'][1]:.1%} < calibrated per-run rule's {scores['per-run, calibrated'][1]:.1%}, "
          f"both calibrated to {BUDGET:.0%} false alarms")
run.save()
