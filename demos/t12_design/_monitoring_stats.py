"""The statistics the model_monitoring demo computes: calibration error, PSI's binned shares and the KS statistic
against a presorted reference, and the synthetic stream's rows. Plain NumPy, no state: the demo holds the
reference (its bins, its sorted rows) and passes it in."""

import numpy as np
from scipy import special

BINS = 15  # equal-width confidence bins of the ECE


def bias2_and_variance(preds, truth):
    """Unbiased estimates from B models' predictions (B x points) of one truth: the variance across the models with
    ddof=1, and the plug-in bias^2 less variance / B (its expectation is bias^2 + variance / B), both averaged over
    the points. Their sum equals the plug-in bias^2 plus the ddof=0 variance."""
    var = float(preds.var(0, ddof=1).mean())
    return float(((preds.mean(0) - truth) ** 2).mean()) - var / len(preds), var


def ece_and_bins(conf, correct, bins=BINS):
    """Equal-width ECE, and per non-empty bin (mean confidence, accuracy, count)."""
    which = np.minimum((conf * bins).astype(int), bins - 1)
    rows, ece = [], 0.0
    for b in range(bins):
        m = which == b
        if m.any():
            rows.append((float(conf[m].mean()), float(correct[m].mean()), int(m.sum())))
            ece += m.mean() * abs(correct[m].mean() - conf[m].mean())
    return float(ece), rows


def calibration_scores(logits, y, T=1.0):
    """ECE (with its bins), accuracy, NLL, Brier score and mean confidence of softmax(logits / T) against y."""
    p = special.softmax(logits / T, axis=1)
    conf, pred = p.max(1), p.argmax(1)
    ece, rows = ece_and_bins(conf, pred == y)
    one_hot = np.eye(p.shape[1])[y]
    nll = float(-np.log(np.clip(p[np.arange(len(y)), y], 1e-15, None)).mean())
    return {"ece": ece, "rows": rows, "acc": float((pred == y).mean()), "pred": pred, "nll": nll,
            "brier": float(((p - one_hot) ** 2).sum(1).mean()), "conf": float(conf.mean())}


def quantile_shares(inner_edges, values):
    """The share of values in each bin that the inner edges (ascending) cut: len(inner_edges) + 1 shares."""
    return np.bincount(np.searchsorted(inner_edges, values), minlength=len(inner_edges) + 1) / len(values)


def psi_from_shares(p, q, eps=1e-4):
    """Population Stability Index of shares q against reference shares p (over the last axis)."""
    p, q = np.clip(p, eps, None), np.clip(q, eps, None)
    return ((q - p) * np.log(q / p)).sum(-1)


def ks_statistics(ref_sorted, x):
    """Per column, the largest gap between the reference's and the window's empirical CDFs (the reference sorted
    once, by the caller). Between two window points the window's CDF is flat, so the gap peaks at a window point
    or just before it."""
    xs = np.sort(x, axis=0)
    k = np.arange(1, len(xs) + 1) / len(xs)
    out = np.empty(x.shape[1])
    for j in range(x.shape[1]):
        f_ref = np.searchsorted(ref_sorted[:, j], xs[:, j], "right") / len(ref_sorted)
        out[j] = max(np.abs(k - f_ref).max(), np.abs(k - 1 / len(xs) - f_ref).max())
    return out


def stream_rows(r, rows, features, x0_shift=0.0, unused_shift=0.0, concept=False):
    """Rows of the drift stream: standard-normal features (x0 shifted, the last one shifted), and labels whose
    log-odds are 1.5 x0 - x0^2 + 0.5 + 2 x1 - 1.5 x2 (x1's sign flipped under concept drift)."""
    x = r.normal(0, 1, (rows, features))
    x[:, 0] += x0_shift
    x[:, -1] += unused_shift
    logit = 1.5 * x[:, 0] - x[:, 0] ** 2 + 0.5 + (-2.0 if concept else 2.0) * x[:, 1] - 1.5 * x[:, 2]
    return x, (r.uniform(0, 1, rows) < special.expit(logit)).astype(int)
