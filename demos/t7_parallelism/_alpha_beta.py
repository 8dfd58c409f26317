"""The alpha-beta fit of scale_model, per collective: fit (alpha, beta) to the measured times at each world
size and over all of them together, and record each fit's metrics, its check against the measured times at
the largest sizes, and its table row (plumbing the demo calls once per collective)."""

from __future__ import annotations

from demos.common import cluster_model

MiB = 2**20


def fit_and_record(run, backend, kind, measured, world_sizes, sizes_bytes, largest, margin, fits, fit_rows):
    """Fill ``fits[(kind, p)]`` and ``fit_rows``; return the measured-vs-model lines to plot (ms)."""
    features = cluster_model.FEATURES[kind]

    def points(worlds, only=None):
        return [(*features(n, p), measured[p][(kind, n)].median_s) for p in worlds for n in sizes_bytes
                if only is None or n in only]

    lines = {}
    for p in world_sizes:
        alpha, beta = fits[(kind, p)] = cluster_model.fit_alpha_beta(points([p]))
        err_all = cluster_model.max_relative_error(points([p]), alpha, beta)
        err_large = cluster_model.max_relative_error(points([p], largest), alpha, beta)
        run.metric(f"{backend}.{kind}.p{p}.alpha_us", alpha * 1e6, "us",
                   label=f"{kind} on {p} ranks: fitted alpha (latency per step)")
        run.metric(f"{backend}.{kind}.p{p}.bandwidth_gbs", 1 / beta / 1e9, "GB/s",
                   label=f"{kind} on {p} ranks: fitted 1/beta (bytes each rank sends per second)")
        run.metric(f"{backend}.{kind}.p{p}.max_rel_err", err_all, "fraction",
                   label=f"{kind} on {p} ranks: largest |model - measured| / measured over all sizes")
        run.metric(f"{backend}.{kind}.p{p}.max_rel_err_largest", err_large, "fraction",
                   label=f"{kind} on {p} ranks: largest relative error at the two largest sizes")
        run.check(f"fit.{kind}.p{p}.largest_sizes", err_large <= margin,
                  f"alpha {alpha * 1e6:.1f} us, 1/beta {1 / beta / 1e9:.3f} GB/s reproduce the measured times within "
                  f"{err_large:.0%} at {', '.join(f'{n / MiB:g} MiB' for n in largest)} "
                  f"(margin {margin:.0%})")
        fit_rows.append([kind, str(p), round(alpha * 1e6, 1), round(1 / beta / 1e9, 3), round(err_all, 3),
                         round(err_large, 3)])
        xs = [n / MiB for n in sizes_bytes]
        timings = [measured[p][(kind, n)] for n in sizes_bytes]
        lines[f"measured, {p} ranks"] = (xs, [t.median_s * 1e3 for t in timings], timings)
        lines[f"model, {p} ranks"] = (xs, [cluster_model.collective_time(kind, n, p, alpha, beta) * 1e3
                                            for n in sizes_bytes])
    if len(world_sizes) > 1:
        alpha, beta = cluster_model.fit_alpha_beta(points(world_sizes))
        err_all = cluster_model.max_relative_error(points(world_sizes), alpha, beta)
        err_large = cluster_model.max_relative_error(points(world_sizes, largest), alpha, beta)
        run.metric(f"{backend}.{kind}.joint.max_rel_err_largest", err_large, "fraction",
                   label=f"{kind}: one (alpha, beta) for every world size, largest relative error at the two "
                         "largest sizes")
        fit_rows.append([kind, "all together", round(alpha * 1e6, 1), round(1 / beta / 1e9, 3), round(err_all, 3),
                         round(err_large, 3)])
    return lines
