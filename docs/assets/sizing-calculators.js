// Sizing calculators: KV cache, training memory per GPU, serving bounds (docs/calculators.md).
//
// The formulas are a line-by-line port of website/sizing.py (kv_cache, training_memory, serving), which
// reuses the demos' own formulas; tests/test_calculators_browser.py runs both on many random inputs in
// Chromium and requires the same numbers (1e-9 relative). Python -> JavaScript:
//   kv_cache(**cfg)        -> SizingCalc.kvCache(cfg)
//   training_memory(**cfg) -> SizingCalc.trainingMemory(cfg)
//   serving(**cfg)         -> SizingCalc.serving(cfg)
// cfg has the Python keyword names; results have the Python dicts' keys. No library, no request.
(function () {
  "use strict";

  const GB = 1e9;

  function kvCache(c) {
    const batch = c.batch ?? 1, dtypeBytes = c.dtype_bytes ?? 2, block = c.block_tokens ?? 0;
    const perToken = (1 * c.layers * 2 * c.kv_heads * c.head_dim * 1 * 1) * dtypeBytes;
    const exact = perToken * c.context * batch;
    const held = block > 0 ? Math.ceil(c.context / block) * block : c.context;
    const allocated = perToken * held * batch;
    return { bytes_per_token: perToken, bytes: exact, allocated_bytes: allocated, waste_bytes: allocated - exact,
             waste_fraction: allocated ? (allocated - exact) / allocated : 0.0 };
  }

  const OPTIMIZER_MOMENTS = { adam: 2, sgd_momentum: 1, sgd: 0 };
  const STATE_BYTES = { mixed: { weights: 2, grads: 2, optimizer: 12 }, fp32: { weights: 4, grads: 4, optimizer: 8 } };

  function stateBytesPerParam(precision, optimizer) {
    const base = { ...STATE_BYTES[precision] };
    base.optimizer -= 4 * (OPTIMIZER_MOMENTS.adam - OPTIMIZER_MOMENTS[optimizer]);
    return base;
  }

  function trainingMemory(c0) {
    const c = { microbatch_size: 1, microbatches: 1, precision: "mixed", optimizer: "adam", zero_stage: 0, dp: 1,
                tp: 1, pp: 1, recompute: "none", gpu_memory_gb: 80.0, ...c0 };
    const per = stateBytesPerParam(c.precision, c.optimizer);
    const shard = c.params / (c.tp * c.pp);
    const weights = per.weights * shard / (c.zero_stage >= 3 ? c.dp : 1);
    const grads = per.grads * shard / (c.zero_stage >= 2 ? c.dp : 1);
    const optimizer = per.optimizer * shard / (c.zero_stage >= 1 ? c.dp : 1);
    // cluster_model.activation_bytes_per_layer with sequence parallelism (its default)
    const sbh = c.seq_len * c.microbatch_size * c.hidden;
    const t = c.tp;
    const scores = 5.0 * c.heads * c.seq_len / c.hidden;
    let perLayer;
    if (c.recompute === "full") perLayer = 2.0 * sbh / t;
    else if (c.recompute === "selective") perLayer = 34.0 * sbh / t;
    else perLayer = sbh * (34.0 + scores) / t;
    perLayer = perLayer * (c.precision === "fp32" ? 2.0 : 1.0);
    const inFlight = c.pp === 1 ? 1.0 : Math.min(c.pp, c.microbatches); // 1F1B
    const activations = perLayer * (c.layers / c.pp) * inFlight;
    const total = weights + grads + optimizer + activations;
    return { weights_bytes: weights, grads_bytes: grads, optimizer_bytes: optimizer,
             model_states_bytes: weights + grads + optimizer, activation_bytes_per_layer: perLayer,
             microbatches_in_flight: inFlight, activations_bytes: activations, total_bytes: total,
             fits: total <= c.gpu_memory_gb * GB };
  }

  function serving(c) {
    const weights = c.params * c.weight_bytes;
    // more GPUs than KV heads: each GPU still holds a whole KV head, so the cache is replicated
    const replicas = c.kv_heads > 0 ? c.gpus / Math.min(c.gpus, c.kv_heads) : 1.0;
    const kvSeq = kvCache({ layers: c.layers, kv_heads: c.kv_heads, head_dim: c.head_dim, context: c.context, batch: 1,
                            dtype_bytes: c.kv_bytes ?? 2 }).bytes * replicas;
    const stepBytes = weights + c.batch * kvSeq;
    const stepS = stepBytes / (c.gpus * c.bandwidth_gbs * GB);
    const free = c.gpus * c.memory_gb * GB - weights;
    const maxBatch = kvSeq > 0 ? Math.max(0, Math.floor(free / kvSeq)) : 0;
    return { weights_bytes: weights, kv_bytes_per_sequence: kvSeq, kv_replicas: replicas, step_bytes: stepBytes, step_s: stepS,
             tokens_per_s: c.batch / stepS, tokens_per_s_per_sequence: 1.0 / stepS, free_bytes: free,
             max_batch: maxBatch, fits: c.batch <= maxBatch };
  }

  // Published configs (papers / model cards, cited on docs/calculators.md) and datasheet figures (the same
  // as records/datasheets.toml; a test checks them).
  const MODELS = {
    "llama2-7b": { label: "Llama-2-7B", params: 6.74e9, layers: 32, hidden: 4096, heads: 32, kv_heads: 32, head_dim: 128, context: 4096 },
    "llama2-70b": { label: "Llama-2-70B", params: 68.98e9, layers: 80, hidden: 8192, heads: 64, kv_heads: 8, head_dim: 128, context: 4096 },
    "llama3-8b": { label: "Llama-3-8B", params: 8.03e9, layers: 32, hidden: 4096, heads: 32, kv_heads: 8, head_dim: 128, context: 8192 },
    "llama3-70b": { label: "Llama-3-70B", params: 70.6e9, layers: 80, hidden: 8192, heads: 64, kv_heads: 8, head_dim: 128, context: 8192 },
    "gpt3-175b": { label: "GPT-3 175B", params: 175e9, layers: 96, hidden: 12288, heads: 96, kv_heads: 96, head_dim: 128, context: 2048 },
  };
  const GPUS = {
    h100: { label: "H100 SXM 80GB", memory_gbps: 3350.0, memory_gb: 80 },
    h200: { label: "H200 SXM 141GB", memory_gbps: 4800.0, memory_gb: 141 },
    a100: { label: "A100 SXM4 80GB", memory_gbps: 2039.0, memory_gb: 80 },
    l40s: { label: "L40S 48GB", memory_gbps: 864.0, memory_gb: 48 },
  };

  // -- the forms ---------------------------------------------------------------------------------------
  function fmtBytes(b) {
    if (!isFinite(b)) return "–";
    if (Math.abs(b) >= 1e9) return (b / 1e9).toFixed(2) + " GB";
    if (Math.abs(b) >= 1e6) return (b / 1e6).toFixed(2) + " MB";
    if (Math.abs(b) >= 1e3) return (b / 1e3).toFixed(2) + " kB";
    return b.toFixed(0) + " B";
  }

  function read(form) {
    const values = {};
    let bad = "";
    for (const el of form.querySelectorAll("[data-key]")) {
      const key = el.dataset.key;
      if (el.tagName === "SELECT") { values[key] = isNaN(Number(el.value)) ? el.value : Number(el.value); continue; }
      const v = Number(el.value);
      const min = el.dataset.min !== undefined ? Number(el.dataset.min) : 1;
      const whole = el.dataset.whole !== undefined;
      if (el.value.trim() === "" || !isFinite(v) || v < min || (whole && !Number.isInteger(v))) {
        bad = bad || `${el.dataset.label || key} must be ${whole ? "a whole number" : "a number"} >= ${min}`;
      }
      values[key] = v;
    }
    return [values, bad];
  }

  function setOut(root, id, text) {
    const el = root.querySelector(`[data-out="${id}"]`);
    if (el) el.textContent = text;
  }

  function wire(id, compute) {
    const root = document.getElementById(id);
    if (!root || root.dataset.ready) return;
    root.dataset.ready = "1";
    const error = root.querySelector(".sc-error");
    const update = () => {
      const [values, bad] = read(root);
      error.hidden = !bad;
      error.textContent = bad;
      compute(root, bad ? null : values);
    };
    root.addEventListener("input", update);
    root.addEventListener("change", update);
    for (const preset of root.querySelectorAll("[data-preset]")) {
      const table = preset.dataset.preset === "gpu" ? GPUS : MODELS;
      preset.addEventListener("change", () => {
        const m = table[preset.value];
        if (!m) return;
        for (const el of root.querySelectorAll(`[data-from-${preset.dataset.preset}]`)) {
          const from = el.getAttribute(`data-from-${preset.dataset.preset}`);
          const scale = Number(el.dataset.scale || 1);
          if (m[from] !== undefined) el.value = String(m[from] / scale);
        }
        update();
      });
    }
    update();
  }

  function start() {
    wire("kv-calculator", (root, v) => {
      if (!v) { for (const k of ["per-token", "total", "allocated", "waste"]) setOut(root, k, "–"); return; }
      const r = kvCache(v);
      setOut(root, "per-token", `${fmtBytes(r.bytes_per_token)} (${(r.bytes_per_token / 1024).toFixed(1)} KiB)`);
      setOut(root, "total", fmtBytes(r.bytes));
      setOut(root, "allocated", fmtBytes(r.allocated_bytes));
      setOut(root, "waste", `${fmtBytes(r.waste_bytes)} (${(100 * r.waste_fraction).toFixed(2)}%)`);
    });
    wire("training-calculator", (root, v) => {
      const keys = ["weights", "grads", "optimizer", "activations", "total"];
      if (!v) { for (const k of keys) setOut(root, k, "–"); setOut(root, "fits", "–"); return; }
      v.params = v.params * 1e9; // the field is in billions
      const r = trainingMemory(v);
      setOut(root, "weights", fmtBytes(r.weights_bytes));
      setOut(root, "grads", fmtBytes(r.grads_bytes));
      setOut(root, "optimizer", fmtBytes(r.optimizer_bytes));
      setOut(root, "activations", `${fmtBytes(r.activations_bytes)} (${r.microbatches_in_flight} microbatch(es) in flight)`);
      setOut(root, "total", fmtBytes(r.total_bytes));
      setOut(root, "fits", r.fits ? `yes, within ${v.gpu_memory_gb} GB` : `no: more than ${v.gpu_memory_gb} GB`);
    });
    wire("serving-calculator", (root, v) => {
      const keys = ["weights", "kv-seq", "step", "tokens", "per-seq", "max-batch"];
      if (!v) { for (const k of keys) setOut(root, k, "–"); return; }
      v.params = v.params * 1e9;
      const r = serving(v);
      setOut(root, "weights", fmtBytes(r.weights_bytes));
      setOut(root, "kv-seq", fmtBytes(r.kv_bytes_per_sequence));
      setOut(root, "step", `${(r.step_s * 1e3).toFixed(2)} ms`);
      setOut(root, "tokens", `${r.tokens_per_s.toFixed(0)} tokens/s`);
      setOut(root, "per-seq", `${r.tokens_per_s_per_sequence.toFixed(1)} tokens/s`);
      setOut(root, "max-batch", r.fits ? String(r.max_batch) : `${r.max_batch} (the batch of ${v.batch} does not fit)`);
    });
  }

  window.SizingCalc = { kvCache, trainingMemory, serving, stateBytesPerParam, MODELS, GPUS };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
  // Material's instant navigation swaps the page without a reload
  if (window.document$ && window.document$.subscribe) window.document$.subscribe(start);
})();
