"""The fraud_service demo's plumbing: synthetic data, the feature store file, the server process, the load generator.

The load generator is open-loop: arrival times are drawn first (Poisson, from a seeded generator) and each request
is sent at its time whether or not earlier ones have been answered. Latency runs from the *scheduled* send time,
so a request that waited in the client for a connection, or behind a late event loop, is not hidden (the
coordinated-omission mistake of closed-loop benchmarks). It speaks HTTP/1.1 over raw asyncio streams, with a pool
of keep-alive connections: a full HTTP client library costs more client CPU per request, and the
client shares this machine's cores with the server.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time

import numpy as np

from demos.t12_design._fraud_app import MERCHANT_COLUMNS, USER_COLUMNS, feature_matrix

APP = "demos.t12_design._fraud_app:create_app"
LENGTH = re.compile(rb"content-length:\s*(\d+)", re.I)


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def make_transactions(n: int, rng: np.random.Generator, fraud_rate: float = 0.015) -> dict:
    """Users and merchants with aggregates (the feature store), and n transactions whose fraud depends on them."""
    n_users, n_merchants = max(n // 20, 50), max(n // 100, 20)
    users = np.column_stack([rng.poisson(rng.gamma(2.0, 2.0, n_users)), np.exp(rng.normal(3.8, 0.7, n_users)),
                             rng.beta(0.5, 60, n_users), rng.exponential(600, n_users) + 1])
    merchants = np.column_stack([rng.poisson(rng.gamma(2.0, 50.0, n_merchants)),
                                 np.exp(rng.normal(4.0, 0.8, n_merchants)), rng.beta(0.6, 80, n_merchants)])
    t = {"user_id": rng.integers(0, n_users, n), "merchant_id": rng.integers(0, n_merchants, n),
         "hour": rng.integers(0, 24, n), "new_device": (rng.random(n) < 0.06).astype(int),
         "country_mismatch": (rng.random(n) < 0.04).astype(int), "online": (rng.random(n) < 0.5).astype(int)}
    u, m = users[t["user_id"]], merchants[t["merchant_id"]]
    t["amount"] = np.round(u[:, 1] * np.exp(rng.normal(0, 0.8, n)), 2)
    # Fraud risk: interactions (new device AND another country), amounts far above the user's habit, night-time
    # online purchases, risky merchants and users, young accounts. No single feature separates it.
    risk = (2.5 * t["new_device"] + 2.5 * t["country_mismatch"] + 2.0 * t["new_device"] * t["country_mismatch"]
            + 2.5 * (t["amount"] > 3 * u[:, 1]) + 1.5 * (t["hour"] < 6) * t["online"] + 60 * m[:, 2] + 40 * u[:, 2]
            - 0.5 * np.log1p(u[:, 3]) + 0.1 * u[:, 0])
    lo, hi = -20.0, 20.0
    for _ in range(50):  # the intercept that gives the wanted fraud rate
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sigmoid(risk + mid).mean() < fraud_rate else (lo, mid)
    t["fraud"] = (rng.random(n) < sigmoid(risk + lo)).astype(int)
    t["x"] = feature_matrix(t["amount"], t["hour"], t["new_device"], t["country_mismatch"], t["online"], u, m)
    return {"tx": t, "users": users, "merchants": merchants}


def write_feature_store(path: str, users: np.ndarray, merchants: np.ndarray) -> None:
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA journal_mode=WAL")
        c.execute(f"CREATE TABLE users (id INTEGER PRIMARY KEY, {', '.join(f'{k} REAL' for k in USER_COLUMNS)})")
        columns = ", ".join(f"{k} REAL" for k in MERCHANT_COLUMNS)
        c.execute(f"CREATE TABLE merchants (id INTEGER PRIMARY KEY, {columns})")
        c.execute("CREATE TABLE decisions (request_id INTEGER, score REAL, decision TEXT, at REAL)")
        c.executemany("INSERT INTO users VALUES (?, ?, ?, ?, ?)", [(i, *map(float, r)) for i, r in enumerate(users)])
        c.executemany("INSERT INTO merchants VALUES (?, ?, ?, ?)",
                      [(i, *map(float, r)) for i, r in enumerate(merchants)])
    os.chmod(path, 0o600)


def payloads(tx: dict, rows: np.ndarray, first_id: int) -> list[bytes]:
    keys = ["user_id", "merchant_id", "amount", "hour", "new_device", "country_mismatch", "online"]
    return [json.dumps({"request_id": first_id + k, **{key: tx[key][i].item() for key in keys}}).encode()
            for k, i in enumerate(rows)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    """Whether a new server could listen on port (SO_REUSEADDR, as servers set it: closed connections in
    TIME_WAIT do not count, a listening socket does)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def start_server(port: int, env: dict, log_path: str, cwd: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "uvicorn", "--factory", APP, "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1", "--log-level", "warning", "--no-access-log"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **env, "OMP_NUM_THREADS": "1", "PYTHONPATH": cwd})
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}): {open(log_path).read()[-2000:]}")
        try:
            call(port, "GET", "/stats")
            return proc
        except OSError:
            time.sleep(0.1)
    stop_server(proc)
    raise RuntimeError("the server did not answer within 90 s")


def stop_server(proc: subprocess.Popen) -> None:
    """Terminate by PID, wait, kill if it does not go."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def call(port: int, method: str, path: str, body: dict | None = None) -> dict:
    """One blocking request (configuration and statistics, between load points)."""
    data = json.dumps(body).encode() if body is not None else b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n"
                  .encode() + data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    head, _, rest = b"".join(chunks).partition(b"\r\n\r\n")
    return json.loads(rest)


class Pool:
    """Keep-alive HTTP/1.1 connections, at most `limit` at once (a request beyond waits, and its latency shows it)."""

    def __init__(self, port: int, limit: int):
        self.port, self.idle, self.slots = port, [], asyncio.Semaphore(limit)

    async def post(self, path: bytes, body: bytes, sent_at: float, on_send) -> tuple[int, bytes]:
        async with self.slots:
            reader, writer = self.idle.pop() if self.idle else await asyncio.open_connection("127.0.0.1", self.port)
            on_send()  # the actual send time: the request is written now
            try:
                writer.write(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Sent-At: %.6f\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (path, sent_at, len(body), body))
                head = await reader.readuntil(b"\r\n\r\n")
                answer = await reader.readexactly(int(LENGTH.search(head).group(1)))
            except BaseException:  # a timeout or an error: this connection's state is unknown, close it
                writer.close()
                raise
            self.idle.append((reader, writer))
            return int(head[9:12]), answer

    def close(self):
        for _, writer in self.idle:
            writer.close()


async def open_loop(port: int, bodies: list[bytes], rate: float, duration: float, seed: int, timeout: float,
                    connections: int) -> dict:
    """Send bodies at Poisson times (rate per second, for duration seconds); latency from each scheduled time.
    Also the send lag of each request: when it was written to its connection minus when it was scheduled (the
    generator's own lateness, timer slop and a busy client loop, plus any wait for a free connection)."""
    gaps = np.random.default_rng(seed).exponential(1 / rate, int(rate * duration * 2) + 20)
    times = np.cumsum(gaps)
    times = times[times < duration][:len(bodies)]
    loop, pool = asyncio.get_running_loop(), Pool(port, connections)
    out = {"latency_s": np.full(len(times), np.nan), "status": np.zeros(len(times), int),
           "answers": [None] * len(times), "send_lag_s": np.full(len(times), np.nan)}

    async def one(i, when):
        def sent():
            out["send_lag_s"][i] = loop.time() - when

        try:
            status, answer = await asyncio.wait_for(pool.post(b"/score", bodies[i], when + to_epoch, sent),
                                                    when + timeout - loop.time())
            out["status"][i], out["latency_s"][i] = status, loop.time() - when
            if status == 200:
                out["answers"][i] = json.loads(answer)
        except asyncio.TimeoutError:
            out["status"][i], out["latency_s"][i] = -1, timeout  # a timeout counts as the timeout: a lower bound
        except OSError:
            out["status"][i], out["latency_s"][i] = -2, loop.time() - when

    cpu0, t0 = time.process_time(), loop.time() + 0.02
    to_epoch = time.time() - loop.time()  # the scheduled time, sent in a header, in the wall clock both sides read
    tasks = []
    for i, at in enumerate(times):
        delay = t0 + at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, t0 + at)))
    await asyncio.gather(*tasks)
    out["wall_s"], out["client_cpu_s"] = loop.time() - t0, time.process_time() - cpu0
    pool.close()
    return out


def summarize(out: dict, budget_ms: float) -> dict:
    """Percentiles (ms) over requests the server accepted (200, errors and timeouts); rejects (503) apart."""
    status, lat = out["status"], out["latency_s"] * 1e3
    accepted = status != 503
    answers = [a for a in out["answers"] if a is not None]
    pct = (lambda q: float(np.percentile(lat[accepted], q))) if accepted.any() else (lambda q: float("nan"))
    stages = {k: np.array([a["stages_ms"][k] for a in answers]) for k in (answers[0]["stages_ms"] if answers else [])}
    calls = {a["call"]: a["stages_ms"]["model_call"] for a in answers}
    batches = {a["call"]: a["batch"] for a in answers}
    return {"sent": len(status), "ok": int((status == 200).sum()), "rejected": int((status == 503).sum()),
            "timeouts": int((status == -1).sum()), "errors": int(((status == -2) | ((status > 0) & (status != 200) &
                                                                                   (status != 503))).sum()),
            "p50": pct(50), "p95": pct(95), "p99": pct(99), "over_budget": float((lat[accepted] > budget_ms).mean())
            if accepted.any() else 0.0, "throughput": int((status == 200).sum()) / out["wall_s"],
            "mean_batch": float(np.mean([a["batch"] for a in answers])) if answers else 0.0,
            # model time per request: the distinct calls' times (a batch's answers share one) over their requests
            "model_per_request_ms": sum(calls.values()) / sum(batches.values()) if answers else 0.0,
            "send_lag_p99": float(np.nanpercentile(out["send_lag_s"], 99) * 1e3)
            if np.isfinite(out["send_lag_s"]).any() else float("nan"),
            "stages": {k: (float(np.percentile(v, 50)), float(np.percentile(v, 99))) for k, v in stages.items()},
            "client_cores": out["client_cpu_s"] / out["wall_s"]}
