# %% [markdown]
# # Model monitoring: bias and variance, calibration, drift, and what watching a model costs
#
# Three ideas an ML systems engineer is asked to explain, each measured on synthetic data whose truth is
# known: (1) the bias-variance decomposition across model capacity, set beside the test MSE on fresh labels;
# (2) calibration error of an overfit classifier and its repair by temperature scaling; (3) input drift
# and concept drift on a stream of windows, with the alarm delay and the false-alarm rate of two common
# rules (PSI and a Kolmogorov-Smirnov test) and of a PSI on the model's own scores, and the accuracy the
# model lost. Last, the cost of the monitoring itself per 1,000 rows.

# %%
import lightgbm as lgb
import numpy as np
from scipy import optimize, stats
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.tree import DecisionTreeRegressor

from demos.harness.run import start
from demos.t12_design._monitoring_stats import (bias2_and_variance, calibration_scores, ece_and_bins, ks_statistics,
                                                psi_from_shares, quantile_shares, stream_rows)

run = start(
    "model_monitoring",
    title="Bias-variance, calibration and drift: decomposed, repaired and detected",
    sizes={  # bias-variance: tree depths, training sets, rows each; calibration: rows; drift: windows, rows a window
        "tiny": {"depths": [1, 2, 3, 4, 6, 8, 10], "sets": 12, "train": 150, "calib_rows": 4000,
                 "windows": 24, "window": 300, "null_windows": 100, "features": 6},
        "small": {"depths": list(range(1, 13)), "sets": 50, "train": 300, "calib_rows": 16000,
                  "windows": 60, "window": 500, "null_windows": 600, "features": 8},
        "full": {"depths": list(range(1, 16)), "sets": 200, "train": 1000, "calib_rows": 60000,
                 "windows": 120, "window": 2000, "null_windows": 2000, "features": 16},
    },
    cpu_threads=1,
)
S = run.sizes
SEED = run.options.seed
run.not_run("cuda", "scikit-learn, LightGBM and SciPy run on the host; the lesson does not depend on the device")

# %% [markdown]
# ## 1. Bias and variance across model capacity
#
# Test error at a point x, averaged over training sets D and label noise, splits exactly into
# bias^2 = (E_D[f_D(x)] - f(x))^2, variance = Var_D[f_D(x)] and noise = sigma^2 (Geman, Bienenstock and
# Doursat, "Neural Networks and the Bias/Variance Dilemma", Neural Computation 1992). Regression trees of
# depth 1 to 12 are fit to B training sets drawn from y = sin(2 pi x) + noise. The estimates are the unbiased
# ones: variance across the B trees with ddof=1, and bias^2 as the plug-in (mean of the B trees - f)^2 minus
# variance / B, since the plug-in's expectation is bias^2 + variance / B (so it can dip below zero when the
# bias is nil). On these estimates bias^2 + variance + noise is exactly the mean squared gap between the trees
# and f plus sigma^2; the check compares that sum with the MSE each tree scores on fresh noisy labels on a
# fixed grid, so their gap is the sampling error of those fresh labels, not a test of the identity.
# In practice there is one training set: bootstrap resamples of it stand in for new ones.

# %%
SIGMA = 0.3
rng = np.random.default_rng(SEED)
true_f = lambda x: np.sin(2 * np.pi * x)  # noqa: E731
GRID = np.linspace(0.02, 0.98, 200)
B, N_TRAIN = S["sets"], S["train"]
bv = {}
one_set = rng.uniform(0, 1, N_TRAIN)
one_y = true_f(one_set) + rng.normal(0, SIGMA, N_TRAIN)
for depth in S["depths"]:
    preds, boot, sq_err = [], [], []
    for b in range(B):
        x = rng.uniform(0, 1, N_TRAIN)
        y = true_f(x) + rng.normal(0, SIGMA, N_TRAIN)
        tree = DecisionTreeRegressor(max_depth=depth, random_state=b).fit(x[:, None], y)
        p = tree.predict(GRID[:, None])
        preds.append(p)
        y_test = true_f(GRID) + rng.normal(0, SIGMA, GRID.size)  # fresh test labels for every model
        sq_err.append((y_test - p) ** 2)
        idx = rng.integers(0, N_TRAIN, N_TRAIN)  # a bootstrap resample of the one training set
        boot.append(DecisionTreeRegressor(max_depth=depth, random_state=b).fit(one_set[idx, None], one_y[idx])
                    .predict(GRID[:, None]))
    bias2, var = bias2_and_variance(np.array(preds), true_f(GRID))
    bv[depth] = {"bias2": bias2, "var": var, "noise": SIGMA ** 2, "mse": float(np.mean(sq_err)),
                 "boot_var": float(np.array(boot).var(0, ddof=1).mean())}
    bv[depth]["sum"] = bias2 + var + SIGMA ** 2

worst_gap = max(abs(v["sum"] - v["mse"]) / v["mse"] for v in bv.values())
run.check("bias_variance.adds_up", worst_gap < 0.06,
          f"the decomposition is exact on these estimates; against the test MSE measured on fresh noisy labels it "
          f"differs by at most {worst_gap:.3f} of the MSE (< 0.06) over depths, the sampling error of those labels")
D = S["depths"]
best = min(D, key=lambda d: bv[d]["mse"])
run.check("bias_variance.u_shape", D[0] < best < D[-1] and bv[D[-1]]["var"] > bv[D[0]]["var"]
          and bv[D[-1]]["bias2"] < bv[D[0]]["bias2"],
          f"lowest test MSE at depth {best}, inside {D[0]}..{D[-1]}; bias falls and variance rises with depth")

# %% [markdown]
# ## 2. Calibration and temperature scaling
#
# A classifier is calibrated when, among predictions made with confidence p, a fraction p is right.
# Expected calibration error (ECE) bins predictions by confidence (15 equal-width bins) and averages
# |accuracy - confidence| weighted by the bin's share. A boosted-tree model grown far past what 10%
# flipped labels support is overconfident. Temperature scaling divides every logit by one T > 0 fitted on a
# validation split by minimising the negative log-likelihood; it cannot change the argmax, so accuracy is
# untouched ("On Calibration of Modern Neural Networks", Guo et al., ICML 2017,
# https://arxiv.org/abs/1706.04599). The Brier score (mean squared error of the probability vector) and
# the NLL are proper scores: both reward calibration and sharpness together.

# %%
# The ECE code is checked on predictions calibrated by construction: right with probability = confidence.
c = rng.uniform(1 / 3, 1, 200_000)
ece_ideal, _ = ece_and_bins(c, rng.uniform(0, 1, c.size) < c)
run.check("ece.calibrated_by_construction", ece_ideal < 0.01,
          f"ECE of a calibrated-by-construction sample {ece_ideal:.4f}")

X, y = make_classification(n_samples=S["calib_rows"], n_features=20, n_informative=8, n_classes=3,
                           n_clusters_per_class=2, flip_y=0.10, random_state=SEED)
n = len(y)
tr, va, te = slice(0, n // 2), slice(n // 2, 3 * n // 4), slice(3 * n // 4, n)
gbdt = lgb.LGBMClassifier(n_estimators=400, num_leaves=63, learning_rate=0.1, min_child_samples=2,
                          n_jobs=run.cpu_threads, verbose=-1, random_state=SEED).fit(X[tr], y[tr])
logits_va, logits_te = gbdt.predict(X[va], raw_score=True), gbdt.predict(X[te], raw_score=True)
fit = optimize.minimize_scalar(lambda logT: calibration_scores(logits_va, y[va], np.exp(logT))["nll"],
                               bounds=(-3, 4), method="bounded")
T = float(np.exp(fit.x))
before, after = calibration_scores(logits_te, y[te]), calibration_scores(logits_te, y[te], T)
run.check("temperature.keeps_argmax", np.array_equal(before["pred"], after["pred"]) and before["acc"] == after["acc"],
          f"T = {T:.2f}: every test prediction's class unchanged, accuracy {before['acc']:.4f} both")
run.check("temperature.lowers_ece", after["ece"] < before["ece"] and after["nll"] < before["nll"],
          f"held-out ECE {before['ece']:.3f} -> {after['ece']:.3f}, NLL {before['nll']:.3f} -> {after['nll']:.3f}")
run.check("temperature.overconfident", T > 1, f"fitted temperature {T:.2f} > 1: the model was overconfident")

# %% [markdown]
# ## 3. Drift on a stream of windows
#
# A stream of windows of rows from a generator with d features; feature 0 enters the true log-odds
# nonlinearly (1.5 x0 - x0^2), features 1 and 2 linearly, the rest not at all. A logistic regression is
# trained on reference data, which also fixes each feature's 10 quantile bins for the Population
# Stability Index, PSI = sum over bins of (q - p) ln(q / p) (p: the reference's share, q: the window's).
# Two alarm rules run on every window: any feature's PSI > 0.2 (the usual "significant shift" level), and
# any feature's two-sample KS test p-value < 0.01 / d (Bonferroni over the d features). A third rule watches
# the model's own output: the PSI of its predicted probabilities against the reference's scores (10 quantile
# bins of those), with the same 0.2 level. Three streams, each changing at the middle window, and one stream
# that never changes, for the false-alarm rate:
#
# - covariate drift on a used feature: x0's mean rises steadily, by 2 standard deviations at the last
#   window, taking the inputs where the linear model extrapolates badly;
# - covariate drift on an unused feature: x_{d-1} jumps by one standard deviation; the model ignores it;
# - concept drift: the inputs stay put, and feature 1's effect on the label changes sign. The score is a
#   function of the inputs alone, so its distribution cannot move either: only labels can show this one.
#
# Labels come late in production; accuracy is computed per window as if they had all arrived.

# %%
NF, W, NW = S["features"], S["window"], S["windows"]
SHIFT_AT = NW // 2
RATE = 2.0 / (NW - SHIFT_AT)  # the used feature's mean drifts by 2 standard deviations by the last window
LEVELS = np.linspace(0, 1, 11)[1:-1]


X_ref, y_ref = stream_rows(rng, 10 * W, NF)
model = LogisticRegression(max_iter=500).fit(X_ref, y_ref)
EDGES = np.quantile(X_ref, LEVELS, axis=0)  # (9, d): inner bin edges per feature


def bin_shares(x):
    """Each feature's share of rows in each of the reference's 10 quantile bins: (d, 10)."""
    return np.stack([quantile_shares(EDGES[:, j], x[:, j]) for j in range(NF)])


REF_SHARE = bin_shares(X_ref)


def psi(x):
    """PSI of every feature of window x against the reference's quantile bins."""
    return psi_from_shares(REF_SHARE, bin_shares(x))


# The model's scores on the reference fix 10 quantile bins of the score, as for a feature.
REF_SCORES = model.predict_proba(X_ref)[:, 1]
SCORE_EDGES = np.quantile(REF_SCORES, LEVELS)
REF_SCORE_SHARE = quantile_shares(SCORE_EDGES, REF_SCORES)


def score_psi(prob):
    """PSI of one window's predicted probabilities against the reference's scores."""
    return float(psi_from_shares(REF_SCORE_SHARE, quantile_shares(SCORE_EDGES, prob)))


def ks_scipy(x):
    """SciPy's two-sample KS test per feature, as a first version would call it (it sorts the reference every time)."""
    return np.array([stats.ks_2samp(X_ref[:, j], x[:, j]).pvalue for j in range(NF)])


REF_SORTED = np.sort(X_ref, axis=0)
# The alarm p < 0.01 / d is the same as D > a critical value, computed once from the asymptotic distribution
# SciPy's method="asymp" uses, at the effective sample size m n / (m + n).
KS_CRIT = float(stats.kstwo.isf(0.01 / NF, round(len(X_ref) * W / (len(X_ref) + W))))


def ks_stat(x):
    return ks_statistics(REF_SORTED, x)


def monitor(x, prob=None):
    p = psi(x)
    s_psi = score_psi(model.predict_proba(x)[:, 1] if prob is None else prob)
    return {"psi_max": float(p.max()), "psi_alarm": bool(p.max() > 0.2), "ks_alarm": bool(ks_stat(x).max() > KS_CRIT),
            "score_psi": s_psi, "score_psi_alarm": bool(s_psi > 0.2)}


RULES = {"psi": "PSI", "ks": "KS", "score_psi": "score PSI"}


# PSI checked against its exact value for binned normals: bins at N(0,1) quantiles, a window from N(0.5, 1).
exact_q = np.diff(stats.norm.cdf(np.r_[-np.inf, stats.norm.ppf(LEVELS), np.inf], loc=0.5))
exact_psi = float(((exact_q - 0.1) * np.log(exact_q / 0.1)).sum())
big, _ = stream_rows(np.random.default_rng(SEED + 1), 200_000, NF, x0_shift=0.5)
got_psi = float(psi(big)[0])
run.check("psi.vs_exact", abs(got_psi - exact_psi) < 0.05 * exact_psi,
          f"PSI of 200,000 rows from N(0.5, 1): {got_psi:.4f}, exact for binned normals {exact_psi:.4f} (within 5%)")
agree, alarms, gap_d = 0, 0, 0.0
for i, shift in enumerate((0.0, 0.1, 0.2, 0.4)):
    x_chk, _ = stream_rows(np.random.default_rng(SEED + 2 + i), W, NF, x0_shift=shift)
    sp = [stats.ks_2samp(X_ref[:, j], x_chk[:, j], method="asymp") for j in range(NF)]
    gap_d = max(gap_d, float(np.abs(ks_stat(x_chk) - [t.statistic for t in sp]).max()))
    alarms += bool(ks_stat(x_chk).max() > KS_CRIT)
    agree += (ks_stat(x_chk).max() > KS_CRIT) == (min(t.pvalue for t in sp) < 0.01 / NF)
run.check("ks.matches_scipy", gap_d < 1e-12 and agree == 4,
          f"presorted KS vs scipy.stats.ks_2samp(method='asymp') on 4 windows: statistic gap {gap_d:.1e}, "
          f"alarm decisions agree on {agree} of 4 ({alarms} alarms)")
run.check("psi.reference_is_zero", psi(X_ref).max() < 1e-9, "the reference against itself: PSI 0 on every feature")

SCENARIOS = {
    "used_feature": (f"covariate drift, used feature (x0 +{RATE:.3f} sd a window)",
                     lambda w: {"x0_shift": RATE * max(0, w - SHIFT_AT + 1)}),
    "unused_feature": ("covariate drift, unused feature (+1 sd at once)",
                       lambda w: {"unused_shift": 1.0 * (w >= SHIFT_AT)}),
    "concept": ("concept drift (x1's effect flips, inputs unchanged)", lambda w: {"concept": w >= SHIFT_AT}),
}
drift, windows_seen = {}, {}
for name, (label, shift) in SCENARIOS.items():
    r = np.random.default_rng(SEED + 10 + len(drift))
    rows = []
    for w in range(NW):
        x, yy = stream_rows(r, W, NF, **shift(w))
        prob = model.predict_proba(x)[:, 1]
        rows.append({**monitor(x, prob), "acc": float(((prob > 0.5) == yy).mean()),
                     "auc": float(roc_auc_score(yy, prob))})
    windows_seen[name] = rows
    pre, post = rows[:SHIFT_AT], rows[SHIFT_AT:]
    first = {rule: next((i for i, row in enumerate(post) if row[f"{rule}_alarm"]), None) for rule in RULES}
    drift[name] = {"label": label, "delay": first, "acc_pre": np.mean([r_["acc"] for r_ in pre]),
                   "acc_post": np.mean([r_["acc"] for r_ in post[-10:]]),  # the last ten windows, drift fully in
                   "auc_pre": np.mean([r_["auc"] for r_ in pre]), "auc_post": np.mean([r_["auc"] for r_ in post[-10:]]),
                   "post_alarm_frac": {rule: np.mean([r_[f"{rule}_alarm"] for r_ in post]) for rule in RULES},
                   "score_psi_max_after": max(r_["score_psi"] for r_ in post)}

# The false-alarm rate: many windows from the reference distribution itself.
r = np.random.default_rng(SEED + 99)
null = [monitor(stream_rows(r, W, NF)[0]) for _ in range(S["null_windows"])]
far = {rule: float(np.mean([m[f"{rule}_alarm"] for m in null])) for rule in RULES}
null_psi_p99 = float(np.quantile([m["psi_max"] for m in null], 0.99))
null_score_psi_p99 = float(np.quantile([m["score_psi"] for m in null], 0.99))
# PSI at a matched false-alarm rate: the threshold is the no-drift quantile of the largest feature PSI that
# alarms on the same share of drift-free windows as the KS rule, so the two rules' delays compare fairly.
psi_matched = float(np.quantile([m["psi_max"] for m in null], 1 - far["ks"]))
psi_matched_delay = next((i for i, row in enumerate(windows_seen["used_feature"][SHIFT_AT:])
                          if row["psi_max"] > psi_matched), None)

used, unused, concept = drift["used_feature"], drift["unused_feature"], drift["concept"]
run.check("drift.used_feature.detected_and_hurts", None not in (used["delay"]["psi"], used["delay"]["ks"])
          and used["acc_post"] < used["acc_pre"] - 0.05,
          f"alarm delay KS {used['delay']['ks']}, PSI {used['delay']['psi']} windows; accuracy "
          f"{used['acc_pre']:.3f} -> {used['acc_post']:.3f}")
run.check("drift.unused_feature.alarms_without_harm", unused["delay"]["psi"] == 0
          and abs(unused["acc_post"] - unused["acc_pre"]) < 0.03,
          f"PSI alarm on the shift window; accuracy {unused['acc_pre']:.3f} -> {unused['acc_post']:.3f}")
run.check("drift.concept.silent_inputs", concept["post_alarm_frac"]["psi"] == 0
          and concept["acc_post"] < concept["acc_pre"] - 0.1,
          f"no PSI alarm after the change; accuracy {concept['acc_pre']:.3f} -> {concept['acc_post']:.3f}")
run.check("drift.concept.scores_unmoved", concept["post_alarm_frac"]["score_psi"] == 0
          and concept["score_psi_max_after"] < 0.2,
          f"the score is a function of the unchanged inputs: no score-PSI alarm after the change, largest score PSI "
          f"{concept['score_psi_max_after']:.4f} (drift-free p99 {null_score_psi_p99:.4f}, alarm level 0.2)")

# %% [markdown]
# ## 4. What monitoring costs
#
# One window's PSI and KS for every feature (the bin edges and the sorted reference are computed once),
# timed with the harness, against the model's own prediction on the same window, all per 1,000 rows. The
# KS test is also timed as a first version would call it, scipy.stats.ks_2samp with its defaults: it sorts
# the reference again for every window and, at these sample sizes, computes an exact p-value, where the
# alarm only needs the statistic against a threshold computed once.

# %%
x_win, _ = stream_rows(np.random.default_rng(SEED + 5), W, NF)
t_psi = run.time(lambda: psi(x_win), flush=False)
t_ks = run.time(lambda: ks_stat(x_win), flush=False)
t_ks_scipy = run.time(lambda: ks_scipy(x_win), flush=False)
t_model = run.time(lambda: model.predict_proba(x_win), flush=False)

# %% [markdown]
# ## Results

# %%
run.series("bias_variance", f"Test error is U-shaped in tree depth: lowest at depth {best}, bias falls, variance rises",
           "tree depth", "squared error", {
               "test MSE (measured)": (D, [bv[k]["mse"] for k in D]), "bias^2": (D, [bv[k]["bias2"] for k in D]),
               "variance": (D, [bv[k]["var"] for k in D]), "bias^2 + variance + noise": (D, [bv[k]["sum"] for k in D]),
               "variance, bootstrap of one set": (D, [bv[k]["boot_var"] for k in D])},
           hlines={"noise sigma^2": SIGMA ** 2})
run.table("bias_variance", f"Bias-variance by tree depth ({B} training sets of {N_TRAIN} rows, sigma = {SIGMA})",
          ["depth", "test MSE (measured)", "bias^2 + var + noise", "bias^2 (unbiased)", "variance (ddof=1)",
           "variance (bootstrap)"],
          [[k, round(bv[k]["mse"], 4), round(bv[k]["sum"], 4), round(bv[k]["bias2"], 4), round(bv[k]["var"], 4),
            round(bv[k]["boot_var"], 4)] for k in D])
diag = [0.0, 1.0]
run.series("reliability", f"Temperature scaling (T = {T:.2f}) moves the overconfident GBDT toward the diagonal",
           "mean confidence in bin", "accuracy in bin", {
               "before (T = 1)": ([r_[0] for r_ in before["rows"]], [r_[1] for r_ in before["rows"]]),
               f"after (T = {T:.2f})": ([r_[0] for r_ in after["rows"]], [r_[1] for r_ in after["rows"]]),
               "perfect calibration": (diag, diag)})
run.table("calibration", "Held-out calibration of an overfit GBDT (3 classes, 10% flipped labels), before and after",
          ["model", "ECE (15 bins)", "NLL", "Brier", "mean confidence", "accuracy"],
          [[k, round(v["ece"], 4), round(v["nll"], 4), round(v["brier"], 4), round(v["conf"], 4), round(v["acc"], 4)]
           for k, v in (("T = 1", before), (f"T = {T:.2f}", after))])
show = lambda v: "none" if v is None else v  # noqa: E731
run.table("drift", f"Drift at window {SHIFT_AT} of {NW} ({W} rows a window, {NF} features): alarms and accuracy",
          ["stream", "PSI alarm delay (windows)", "KS alarm delay (windows)", "score PSI alarm delay (windows)",
           "accuracy before", "accuracy after", "AUC before", "AUC after"],
          [[v["label"], show(v["delay"]["psi"]), show(v["delay"]["ks"]), show(v["delay"]["score_psi"]),
            round(v["acc_pre"], 3), round(v["acc_post"], 3), round(v["auc_pre"], 3), round(v["auc_post"], 3)] for v in drift.values()])
ws = list(range(NW))
run.series("drift_stream", "Inputs can drift with accuracy intact, and accuracy can fall with inputs intact",
           "window", "accuracy, or largest PSI over features", {
               **{f"accuracy: {k}": (ws, [row["acc"] for row in v]) for k, v in windows_seen.items()},
               **{f"PSI: {k}": (ws, [row["psi_max"] for row in v]) for k, v in windows_seen.items()}},
           hlines={"PSI alarm level 0.2": 0.2})

run.metric("bv.best_depth", best, "value", label="tree depth with the lowest measured test MSE")
run.metric("bv.decomposition_max_rel_gap", worst_gap, "fraction",
           label="largest |bias^2 + var + noise - MSE on fresh noisy labels| / MSE over depths: those labels' "
                 "sampling error")
BV_LABEL = {"mse": "test MSE on fresh noisy labels", "var": "variance across the trees (ddof=1)",
            "bias2": "bias^2, unbiased (plug-in less variance / B; may dip below 0)"}
for tag, k in (("shallow", D[0]), ("best", best), ("deep", D[-1])):
    for key in ("mse", "bias2", "var"):
        run.metric(f"bv.{tag}.{key}", bv[k][key], "mse", label=f"depth {k}: {BV_LABEL[key]}", signed=key == "bias2")
run.metric("bv.deep_over_best_mse", bv[D[-1]]["mse"] / bv[best]["mse"], "x",
           label="deepest tree's test MSE over the best depth's")
run.metric("bv.deep.boot_over_true_var", bv[D[-1]]["boot_var"] / bv[D[-1]]["var"], "x",
           label="deepest tree: bootstrap variance of one set over the variance across fresh sets")
run.metric("calib.temperature", T, "value", label="temperature fitted on the validation split (NLL)")
for tag, v in (("before", before), ("after", after)):
    run.metric(f"calib.{tag}.ece", v["ece"], "fraction", label=f"held-out ECE, 15 equal-width bins, {tag} scaling")
    run.metric(f"calib.{tag}.brier", v["brier"], "value", label=f"held-out Brier score, {tag} scaling")
    run.metric(f"calib.{tag}.nll", v["nll"], "nats", label=f"held-out NLL, {tag} scaling")
    run.metric(f"calib.{tag}.mean_confidence", v["conf"], "fraction",
               label=f"held-out mean top-class confidence, {tag}")
run.metric("calib.accuracy", before["acc"], "fraction", label="held-out accuracy (the same before and after)")
run.metric("calib.ece_before_over_after", before["ece"] / after["ece"], "x", label="held-out ECE before over after")
for k, v in drift.items():
    for rule, say in RULES.items():
        if v["delay"][rule] is not None:
            run.metric(f"drift.{k}.{rule}_delay", v["delay"][rule], "windows",
                       label=f"{v['label']}: windows from the change to the first {say} alarm")
        if v["delay"][rule] is not None and k == "used_feature":
            run.metric(f"drift.used_feature.{rule}_shift_at_alarm", RATE * (v["delay"][rule] + 1), "value",
                       label=f"x0's mean shift, in standard deviations, at the first {say} alarm")
        run.metric(f"drift.{k}.{rule}_alarm_share_after", v["post_alarm_frac"][rule], "fraction",
                   label=f"{v['label']}: share of windows after the change with a {say} alarm")
    run.metric(f"drift.{k}.score_psi_max_after", v["score_psi_max_after"], "value",
               label=f"{v['label']}: largest PSI of the model's scores after the change")
    run.metric(f"drift.{k}.acc_before", v["acc_pre"], "fraction", label=f"{v['label']}: accuracy before")
    run.metric(f"drift.{k}.acc_after", v["acc_post"], "fraction", label=f"{v['label']}: accuracy, last 10 windows")
    run.metric(f"drift.{k}.acc_drop", v["acc_pre"] - v["acc_post"], "fraction", signed=True,
               label=f"{v['label']}: accuracy lost (before - after; negative is a gain)")
    run.metric(f"drift.{k}.acc_abs_change", abs(v["acc_post"] - v["acc_pre"]), "fraction",
               label=f"{v['label']}: |accuracy after - accuracy before|")
    run.metric(f"drift.{k}.auc_after", v["auc_post"], "value", label=f"{v['label']}: AUC, last 10 windows")
for rule, say in RULES.items():
    run.metric(f"drift.null.{rule}_false_alarm_rate", far[rule], "fraction",
               label=f"{say} alarms over {S['null_windows']} windows with no drift")
run.metric("drift.null.psi_p99", null_psi_p99, "value",
           label="99th percentile of the largest PSI over features, no drift")
run.metric("drift.null.score_psi_p99", null_score_psi_p99, "value",
           label="99th percentile of the PSI of the model's scores, no drift")
run.metric("drift.psi_matched_threshold", psi_matched, "value",
           label="largest-feature PSI threshold whose no-drift alarm rate matches the KS rule's")
if psi_matched_delay is not None:
    run.metric("drift.used_feature.psi_matched_delay", psi_matched_delay, "windows",
               label="covariate drift, used feature: windows to the first alarm of PSI at the KS-matched threshold")
per_k = 1000 / W
for key, t, what in (("monitor", t_psi.median_s + t_ks.median_s, f"PSI + KS on {NF} features (windows of {W})"),
                     ("psi", t_psi.median_s, "PSI alone"),
                     ("ks", t_ks.median_s, "KS statistics against a precomputed threshold (presorted reference)"),
                     ("ks_scipy", t_ks_scipy.median_s, "KS tests with scipy.stats.ks_2samp's defaults"),
                     ("model", t_model.median_s, "the model's predict_proba")):
    run.metric(f"cost.{key}_ms_per_1k_rows", t * 1e3 * per_k, "ms", label=f"{what}, per 1,000 rows")
run.metric("cost.ks_scipy_over_presorted", t_ks_scipy.median_s / t_ks.median_s, "x",
           label="KS time: scipy.stats.ks_2samp's defaults over the presorted statistic, same window")
run.metric("cost.monitor_over_model", (t_psi.median_s + t_ks.median_s) / t_model.median_s, "x",
           label="monitoring time over the model's own prediction time, same window")
run.save()
