"""Links and collectives in the alpha-beta (Hockney) model, for the cluster cost model (cluster_model.py).

A message of n bytes costs alpha + n * beta. Ring algorithms as in Thakur, Rabenseifner & Gropp,
"Optimization of Collective Communication Operations in MPICH"
(https://www.mcs.anl.gov/~thakur/papers/ijhpca-coll.pdf); the per-rank traffic factors are the ones
NCCL's "bus bandwidth" uses (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md). n is
always the *full* buffer: the all-reduce's tensor, the all-gather's output, the reduce-scatter's input,
one rank's all-to-all input. Pure Python, no torch (the browser calculator mirrors it).
"""

from __future__ import annotations

from dataclasses import dataclass

from records.inputs import declare

INPUTS = declare(datasheets=["h100"])  # the NVLink figure of the intra-node link preset

GB = 1e9  # decimal gigabytes, as datasheets count
US = 1e-6

# -- links ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth_gbs: float  # per GPU, per direction, GB/s
    alpha_us: float  # per-message latency: an ASSUMPTION, not a datasheet figure
    source: str

    @property
    def alpha_s(self) -> float:
        return self.alpha_us * US

    @property
    def beta_s_per_byte(self) -> float:
        return 1.0 / (self.bandwidth_gbs * GB)


_NVLINK_GBS = INPUTS.datasheet("h100")["nvlink_gbps"]  # per direction, records/datasheets.toml

# InfiniBand NDR is a NIC's line rate (400 Gb/s / 8 bits), not a GPU's datasheet figure: it stays a
# documented constant of this model rather than an entry of records/datasheets.toml, whose entries are
# device classes that records are made on (the check, the roofline table and the device tabs read them all).
IB_NDR_GBS = 400 / 8

LINKS = {
    "nvlink4_h100": Link(
        "NVLink 4 (H100 SXM)", _NVLINK_GBS, 3.0,
        f"NVIDIA H100 Tensor Core GPU datasheet: {2 * _NVLINK_GBS:g} GB/s total NVLink bandwidth per GPU, i.e. "
        f"~{_NVLINK_GBS:g} GB/s per direction (records/datasheets.toml, nvlink_gbps). alpha = 3 us is an "
        "ASSUMPTION (order of NCCL's small-message latency inside a node)."),
    "ib_ndr400": Link(
        "InfiniBand NDR 400 Gb/s, one NIC per GPU", IB_NDR_GBS, 5.0,
        "NVIDIA ConnectX-7 / Quantum-2 NDR: 400 Gb/s = 50 GB/s per direction per GPU (DGX H100 has one NIC per "
        "GPU). alpha = 5 us is an ASSUMPTION (a few microseconds across a switch)."),
}

# -- collectives (alpha-beta, ring / pairwise) ------------------------------------------------------
# Each returns (alpha coefficient, beta coefficient): time = a * alpha + b * beta. The demo fits
# alpha and beta by least squares on exactly these features.


def all_reduce_features(n_bytes: float, p: int) -> tuple[float, float]:
    """Ring all-reduce = reduce-scatter + all-gather: 2(p-1) steps, each rank sends 2(p-1)/p * n."""
    return 2.0 * (p - 1), 2.0 * (p - 1) / p * n_bytes


def all_gather_features(n_bytes: float, p: int) -> tuple[float, float]:
    """Ring all-gather of an n-byte output: p-1 steps, each rank sends (p-1)/p * n."""
    return float(p - 1), (p - 1) / p * n_bytes


def reduce_scatter_features(n_bytes: float, p: int) -> tuple[float, float]:
    """Ring reduce-scatter of an n-byte input: p-1 steps, each rank sends (p-1)/p * n."""
    return float(p - 1), (p - 1) / p * n_bytes


def all_to_all_features(n_bytes: float, p: int) -> tuple[float, float]:
    """Pairwise all-to-all of n bytes per rank: p-1 exchanges, each rank sends (p-1)/p * n."""
    return float(p - 1), (p - 1) / p * n_bytes


FEATURES = {
    "all_reduce": all_reduce_features,
    "all_gather": all_gather_features,
    "reduce_scatter": reduce_scatter_features,
    "all_to_all": all_to_all_features,
}


def collective_time(kind: str, n_bytes: float, p: int, alpha_s: float, beta_s_per_byte: float) -> float:
    """Seconds for one collective of kind ``kind`` on p ranks (0 on one rank)."""
    if p <= 1:
        return 0.0
    a, b = FEATURES[kind](n_bytes, p)
    return a * alpha_s + b * beta_s_per_byte


def bytes_sent_per_rank(kind: str, n_bytes: float, p: int) -> float:
    """What each rank puts on the wire: the beta coefficient (NCCL's bus-bandwidth factor times n)."""
    return 0.0 if p <= 1 else FEATURES[kind](n_bytes, p)[1]


def fit_alpha_beta(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Least-squares alpha and beta from (alpha coefficient, beta coefficient, measured seconds).

    The residuals are *relative* ((model - measured) / measured), so a 4 KB message counts as much as
    a 32 MB one: plain residuals would let the largest messages decide alpha too. Non-negative: if the
    unconstrained solution makes one parameter negative, it is set to 0 and the other refitted."""
    rows = [(a / t, b / t) for a, b, t in points]  # each row should sum (times alpha, beta) to 1
    saa = sum(a * a for a, _ in rows)
    sbb = sum(b * b for _, b in rows)
    sab = sum(a * b for a, b in rows)
    sa = sum(a for a, _ in rows)
    sb = sum(b for _, b in rows)
    det = saa * sbb - sab * sab
    if det > 0:
        alpha = (sa * sbb - sb * sab) / det
        beta = (sb * saa - sa * sab) / det
        if alpha > 0 and beta > 0:
            return alpha, beta
    # one-parameter fits; keep the better one
    only_beta = (0.0, sb / sbb) if sbb > 0 else (0.0, 0.0)
    only_alpha = (sa / saa, 0.0) if saa > 0 else (0.0, 0.0)
    return min((only_beta, only_alpha), key=lambda ab: max_relative_error(points, *ab))


def max_relative_error(points: list[tuple[float, float, float]], alpha: float, beta: float) -> float:
    """max |model - measured| / measured over the points."""
    return max(abs(a * alpha + b * beta - t) / t for a, b, t in points)
