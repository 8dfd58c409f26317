"""The fraud-scoring service of the fraud_service demo: a FastAPI app, served by uvicorn in its own process.

POST /score takes one transaction as JSON and runs the stages a real service runs: parse (pydantic), feature
lookup by primary key in an embedded SQLite feature store, the model (LightGBM or a small MLP, optionally
micro-batched over a window), the decision (threshold plus a rule), and an audit log (an SQLite table). It answers
with the score, the decision and each stage's server time (perf_counter inside the handler, as a service's own
tracing would). An ASGI wrapper counts requests in flight and answers 503 at once above a bound (admission control).

The demo starts it with `python -m uvicorn --factory demos.t12_design._fraud_app:create_app`, naming the model
folder, the feature store and the starting configuration in environment variables (FRAUD_*). POST /config changes
the model, the batching window and the admission bound between load points, so one server process serves them all
(window_ms -1: greedy batching, no timer); {"freeze_gc": true} collects and freezes once the client has warmed it up.
The feature code and the model loaders live here too, so the demo computes in-process scores with the same code.
"""

import asyncio
import gc
import json
import os
import sqlite3
import threading
import time

import numpy as np

# The model's inputs: the request's own fields, then the user's and the merchant's aggregates from the store.
FEATURES = ["log_amount", "amount_over_user_mean", "hour_sin", "hour_cos", "night", "new_device", "country_mismatch",
            "online", "user_txn_24h", "user_log_mean_amount", "user_chargeback_rate", "user_log_age_days",
            "merchant_txn_24h", "merchant_log_mean_amount", "merchant_chargeback_rate"]
USER_COLUMNS = ["txn_24h", "mean_amount", "chargeback_rate", "age_days"]
MERCHANT_COLUMNS = ["txn_24h", "mean_amount", "chargeback_rate"]
# A placeholder threshold: a real service sets it from the cost of each error (a missed fraud against a false
# decline) on matured labels, usually with a review band; the demo measures latency, not this choice.
THRESHOLD = 0.5  # block at or above this score
REVIEW_AMOUNT = 2000.0  # the rule: a large amount from a new device in another country goes to review


def feature_matrix(amount, hour, new_device, country_mismatch, online, user, merchant) -> np.ndarray:
    """Request fields (arrays of n) and store rows (n x 4 user, n x 3 merchant) -> n x 15 float64 features."""
    amount, hour = np.asarray(amount, float), np.asarray(hour, float)
    user, merchant = np.asarray(user, float).reshape(-1, 4), np.asarray(merchant, float).reshape(-1, 3)
    angle = 2 * np.pi * hour / 24
    return np.column_stack([
        np.log1p(amount), amount / np.maximum(user[:, 1], 1.0), np.sin(angle), np.cos(angle), hour < 6,
        new_device, country_mismatch, online,
        user[:, 0], np.log1p(user[:, 1]), user[:, 2], np.log1p(user[:, 3]),
        merchant[:, 0], np.log1p(merchant[:, 1]), merchant[:, 2]]).astype(np.float64)


def decide(score: float, amount: float, new_device: int, country_mismatch: int) -> str:
    if score >= THRESHOLD:
        return "block"
    if amount >= REVIEW_AMOUNT and new_device and country_mismatch:
        return "review"
    return "approve"


def make_mlp(n_in: int):
    import torch

    class MLP(torch.nn.Module):
        """Standardize, then two hidden layers; the logit's sigmoid is the score."""

        def __init__(self):
            super().__init__()
            self.register_buffer("mean", torch.zeros(n_in))
            self.register_buffer("std", torch.ones(n_in))
            self.net = torch.nn.Sequential(torch.nn.Linear(n_in, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32),
                                           torch.nn.ReLU(), torch.nn.Linear(32, 1))

        def forward(self, x):
            return self.net((x - self.mean) / self.std).squeeze(-1)

    return MLP()


def load_models(model_dir: str) -> dict:
    """{"lgbm": fn, "mlp": fn}, each mapping an n x 15 float64 array to n scores (float64 numpy)."""
    import lightgbm as lgb
    import torch

    booster = lgb.Booster(model_file=os.path.join(model_dir, "lgbm.txt"))
    mlp = make_mlp(len(FEATURES))
    mlp.load_state_dict(torch.load(os.path.join(model_dir, "mlp.pt"), weights_only=True))
    mlp.eval()

    def lgbm_scores(x):
        return booster.predict(x, num_threads=1)

    @torch.inference_mode()
    def mlp_scores(x):
        return torch.sigmoid(mlp(torch.from_numpy(x).float())).double().numpy()

    return {"lgbm": lgbm_scores, "mlp": mlp_scores}


class FeatureStore:
    """Aggregates by primary key; one SQLite connection per thread (the event loop's thread, here)."""

    def __init__(self, path: str):
        self.path, self.local = path, threading.local()

    def conn(self) -> sqlite3.Connection:
        if not hasattr(self.local, "conn"):
            self.local.conn = sqlite3.connect(self.path)
            self.local.conn.execute("PRAGMA journal_mode=WAL")
            self.local.conn.execute("PRAGMA synchronous=NORMAL")
        return self.local.conn

    def lookup(self, user_id: int, merchant_id: int):
        c = self.conn()
        user = c.execute("SELECT txn_24h, mean_amount, chargeback_rate, age_days FROM users WHERE id = ?",
                         (user_id,)).fetchone()
        merchant = c.execute("SELECT txn_24h, mean_amount, chargeback_rate FROM merchants WHERE id = ?",
                             (merchant_id,)).fetchone()
        return user, merchant

    def log(self, request_id: int, score: float, decision: str) -> None:
        c = self.conn()
        c.execute("INSERT INTO decisions (request_id, score, decision, at) VALUES (?, ?, ?, ?)",
                  (request_id, score, decision, time.time()))
        c.commit()


def create_app():
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from pydantic import BaseModel

    class ScoreRequest(BaseModel):
        request_id: int
        user_id: int
        merchant_id: int
        amount: float
        hour: int
        new_device: int
        country_mismatch: int
        online: int

    models = load_models(os.environ["FRAUD_MODEL_DIR"])
    store = FeatureStore(os.environ["FRAUD_DB"])
    config = {"model": os.environ.get("FRAUD_MODEL", "lgbm"), "window_ms": float(os.environ.get("FRAUD_WINDOW_MS", 0)),
              "max_batch": int(os.environ.get("FRAUD_MAX_BATCH", 64)),
              "max_inflight": int(os.environ.get("FRAUD_MAX_INFLIGHT", 0)),  # 0: no bound on requests in flight
              "max_queue_ms": float(os.environ.get("FRAUD_MAX_QUEUE_MS", 0))}  # 0: no bound on time already waited
    state = {"inflight": 0, "rejected": 0, "queue": None, "batcher": None, "gc_started": 0.0, "gc_max_ms": 0.0,
             "calls": 0}  # model calls so far: each answer names the call that scored it

    def gc_timer(phase, info):
        """Record the longest garbage-collection pause (it stops the event loop, and every request with it)."""
        if phase == "start":
            state["gc_started"] = time.perf_counter()
        else:
            state["gc_max_ms"] = max(state["gc_max_ms"], (time.perf_counter() - state["gc_started"]) * 1e3)

    gc.callbacks.append(gc_timer)
    if os.environ.get("FRAUD_GC_FREEZE", "1") == "1":
        gc.freeze()  # the objects of the imports and the models are never collected: later collections skip them
        # freeze only covers objects that exist now: what the first requests import or build lazily (HTTP parser,
        # routing, validators, the batcher) is not covered until POST /config {"freeze_gc": true} after a warm-up.

    async def batcher():
        """Take the first waiting request, wait window_ms, take what arrived (up to max_batch), score in one call.
        Greedy (window_ms < 0): no timer, take whatever is queued the moment the worker is free (batch 1 when idle,
        larger under load, since requests queue while the previous call runs)."""
        queue = state["queue"]
        while True:
            items = [await queue.get()]
            if config["window_ms"] > 0:
                await asyncio.sleep(config["window_ms"] / 1e3)  # the window opens with the first request
            while len(items) < config["max_batch"] and not queue.empty():
                items.append(queue.get_nowait())
            t0 = time.perf_counter()
            scores = models[config["model"]](np.vstack([x for x, _ in items]))
            model_ms = (time.perf_counter() - t0) * 1e3
            state["calls"] += 1
            for (_, future), s in zip(items, scores):
                if not future.done():
                    future.set_result((float(s), len(items), model_ms, state["calls"]))

    app = FastAPI()

    @app.post("/score")
    async def score(request: Request):
        t_start = time.perf_counter()
        req = ScoreRequest.model_validate_json(await request.body())
        t_parsed = time.perf_counter()
        user, merchant = store.lookup(req.user_id, req.merchant_id)
        if user is None or merchant is None:
            return JSONResponse({"error": "unknown user or merchant"}, status_code=404)
        x = feature_matrix([req.amount], [req.hour], [req.new_device], [req.country_mismatch], [req.online],
                           user, merchant)
        t_features = time.perf_counter()
        if config["window_ms"] != 0:  # a window, or greedy (-1): through the batcher
            if state["batcher"] is None:
                state["queue"] = asyncio.Queue()
                state["batcher"] = asyncio.get_running_loop().create_task(batcher())
            future = asyncio.get_running_loop().create_future()
            state["queue"].put_nowait((x, future))
            s, batch, model_ms, call = await future
        else:
            t0 = time.perf_counter()
            s, batch = float(models[config["model"]](x)[0]), 1
            model_ms = (time.perf_counter() - t0) * 1e3
            state["calls"] += 1
            call = state["calls"]
        t_model = time.perf_counter()
        decision = decide(s, req.amount, req.new_device, req.country_mismatch)
        t_decided = time.perf_counter()
        store.log(req.request_id, s, decision)
        t_logged = time.perf_counter()
        ms = lambda a, b: (b - a) * 1e3  # noqa: E731
        # "queue" is the wait for the batch to fill (and for the model call itself, in batched mode): model
        # ends when this request's score is back; model_call is the length of the call that scored it.
        return {"score": s, "decision": decision, "batch": batch, "call": call,
                "stages_ms": {"parse": ms(t_start, t_parsed), "features": ms(t_parsed, t_features),
                              "model": ms(t_features, t_model), "model_call": model_ms,
                              "decision": ms(t_model, t_decided), "log": ms(t_decided, t_logged),
                              "server": ms(t_start, t_logged)}}

    @app.post("/config")
    async def set_config(request: Request):
        body = json.loads(await request.body())
        if body.pop("freeze_gc", False):  # after a warm-up: the lazily built objects join the frozen ones
            gc.collect()
            gc.freeze()
        config.update(body)
        return config

    @app.get("/stats")
    async def stats():
        logged = store.conn().execute("SELECT COUNT(*) FROM decisions").fetchone()[0]
        gc_max_ms, state["gc_max_ms"] = state["gc_max_ms"], 0.0  # the longest pause since the last call
        return {"logged": logged, "rejected": state["rejected"], "inflight": state["inflight"], "gc_max_ms": gc_max_ms,
                "cpu_s": time.process_time(), "pid": os.getpid()}

    async def admission(scope, receive, send):
        """Admission control, before the handler runs: answer 503 at once when more than max_inflight requests are
        in the handler, or when the request has already waited more than max_queue_ms since its client sent it
        (the X-Sent-At header: the client's send time, which a real client would send as its deadline)."""
        if scope["type"] != "http" or scope["path"] != "/score":
            return await app(scope, receive, send)
        sent_at = next((float(v) for k, v in scope["headers"] if k == b"x-sent-at"), None)
        waited_ms = (time.time() - sent_at) * 1e3 if sent_at is not None else 0.0
        if (config["max_inflight"] and state["inflight"] >= config["max_inflight"]) or (
                config["max_queue_ms"] and waited_ms > config["max_queue_ms"]):
            state["rejected"] += 1
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]})
            await send({"type": "http.response.body", "body": b"{}"})
            return
        state["inflight"] += 1
        try:
            await app(scope, receive, send)
        finally:
            state["inflight"] -= 1

    return admission
