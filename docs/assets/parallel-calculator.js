// The parallelism calculator: memory per GPU, communication per step, pipeline bubble and projected
// step time for a transformer trained with TP x PP x DP (and ZeRO) on GPUs.
//
// The formulas are a line-by-line port of demos/common/cluster_model.py (with collectives.py and cluster_config.py); tests/test_scale_model.py
// runs both on the same configurations and requires the same numbers (1e-9 relative).
//
// Python -> JavaScript:
//   memory_per_gpu(cfg) -> ParallelCalc.memoryPerGpu(cfg)
//   comm_volume(cfg)    -> ParallelCalc.commVolume(cfg)
//   bubble(cfg)         -> ParallelCalc.bubble(cfg)
//   step_time(cfg)      -> ParallelCalc.stepTime(cfg)
//   problem(cfg)        -> ParallelCalc.problem(cfg)   ("" when valid, else the same one-line message)
//   params_count, config_params, flops_per_token, calibrated_efficiency, activation_bytes_per_layer,
//   microbatches_in_flight, collective_time, bytes_sent_per_rank -> paramsCount, configParams, flopsPerToken,
//   calibratedEfficiency, activationBytesPerLayer, microbatchesInFlight, collectiveTime, bytesSentPerRank
// cfg is a plain object with the Python Config's field names (snake_case: layers, hidden, heads, kv_heads,
// ffn_hidden, gated_mlp, tied_embeddings, vocab,
// seq_len, microbatch_size, microbatches, tp, pp, dp, zero_stage, sequence_parallel, recompute, schedule,
// interleave, overlap_dp, gpus_per_node, gpu_memory_gb, peak_tflops, compute_efficiency,
// intra_bandwidth_gbs, intra_alpha_us, inter_bandwidth_gbs, inter_alpha_us; compute_efficiency null means
// calibrated, as None does in Python); missing fields take the
// Config defaults (ParallelCalc.DEFAULTS). The results have the Python dicts' keys. An invalid
// configuration throws an Error whose message is the one Python's ValueError carries.
//
// The chip figures (the H100's memory, dense BF16 peak and NVLink bandwidth) are not typed here: they come
// from window.MM_DATASHEETS, assets/datasheets.js, which the site build generates from records/datasheets.toml
// and loads first. InfiniBand NDR (a NIC's line rate) and the latencies are constants of the model, as in
// collectives.py.
//
// Everything runs in the page: no library, no request.
(function () {
  "use strict";

  const GB = 1e9;
  const US = 1e-6;

  const SHEETS = window.MM_DATASHEETS;
  if (!SHEETS) throw new Error("parallel-calculator.js: load assets/datasheets.js (window.MM_DATASHEETS) first");
  const H100 = SHEETS.h100;  // cluster_config.Config's default hardware

  const LINKS = {
    nvlink4_h100: { name: "NVLink 4 (H100 SXM)", bandwidth_gbs: H100.nvlink_gbps, alpha_us: 3.0 },
    ib_ndr400: { name: "InfiniBand NDR 400 Gb/s, one NIC per GPU", bandwidth_gbs: 400 / 8, alpha_us: 5.0 },
  };

  // Llama-2-7B and Llama-2-70B (cluster_model.MODELS)
  const MODELS = {
    "7B": { layers: 32, hidden: 4096, heads: 32, kv_heads: 32, ffn_hidden: 11008, gated_mlp: true,
      tied_embeddings: false, vocab: 32000 },
    "70B": { layers: 80, hidden: 8192, heads: 64, kv_heads: 8, ffn_hidden: 28672, gated_mlp: true,
      tied_embeddings: false, vocab: 32000 },
  };

  // cluster_model.EFFICIENCY_BY_HIDDEN: compute efficiency fitted to Megatron-LM's Table 1, by hidden size
  const EFFICIENCY_BY_HIDDEN = [[2304, 0.4431], [3072, 0.4686], [4096, 0.5258], [6144, 0.5357], [8192, 0.5271], [10240, 0.5368], [12288, 0.5653], [16384, 0.5951], [20480, 0.6265], [25600, 0.6188]];

  const DEFAULTS = {
    layers: 32, hidden: 4096, heads: 32, kv_heads: 32, ffn_hidden: 11008, gated_mlp: true, tied_embeddings: false,
    vocab: 32000,
    seq_len: 4096, microbatch_size: 1, microbatches: 8,
    tp: 1, pp: 1, dp: 1, zero_stage: 0, sequence_parallel: true, recompute: "none", schedule: "1f1b",
    interleave: 1, overlap_dp: false,
    gpus_per_node: 8, gpu_memory_gb: H100.memory_gb, peak_tflops: H100.tflops.bfloat16, compute_efficiency: null,
    intra_bandwidth_gbs: LINKS.nvlink4_h100.bandwidth_gbs, intra_alpha_us: LINKS.nvlink4_h100.alpha_us,
    inter_bandwidth_gbs: LINKS.ib_ndr400.bandwidth_gbs, inter_alpha_us: LINKS.ib_ndr400.alpha_us,
  };

  const RECOMPUTE = ["none", "selective", "full"];
  const SCHEDULES = ["1f1b", "gpipe"];
  const WHOLE_FIELDS = ["layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "microbatch_size", "microbatches",
    "tp", "pp", "dp", "interleave", "gpus_per_node"];
  const POSITIVE_FIELDS = ["gpu_memory_gb", "peak_tflops", "intra_bandwidth_gbs", "inter_bandwidth_gbs"];
  const NON_NEGATIVE_FIELDS = ["intra_alpha_us", "inter_alpha_us"];
  const WEIGHT_BYTES = 2, GRAD_BYTES = 2, OPTIMIZER_BYTES = 12;

  // -- collectives: [alpha coefficient, beta coefficient] -----------------------------------------
  const FEATURES = {
    all_reduce: (n, p) => [2.0 * (p - 1), 2.0 * (p - 1) / p * n],
    all_gather: (n, p) => [p - 1, (p - 1) / p * n],
    reduce_scatter: (n, p) => [p - 1, (p - 1) / p * n],
    all_to_all: (n, p) => [p - 1, (p - 1) / p * n],
  };

  function collectiveTime(kind, nBytes, p, alphaS, betaSPerByte) {
    if (p <= 1) return 0.0;
    const [a, b] = FEATURES[kind](nBytes, p);
    return a * alphaS + b * betaSPerByte;
  }

  function bytesSentPerRank(kind, nBytes, p) {
    return p <= 1 ? 0.0 : FEATURES[kind](nBytes, p)[1];
  }

  // -- configurations -------------------------------------------------------------------------------
  function asConfig(cfg) {
    return Object.assign({}, DEFAULTS, cfg || {});
  }

  const isWhole = (x) => typeof x === "number" && Number.isInteger(x) && x >= 1;
  const isNumber = (x) => typeof x === "number" && Number.isFinite(x);

  function problem(cfg) {
    const c = asConfig(cfg);
    for (const name of WHOLE_FIELDS) {
      if (!isWhole(c[name])) return `${name} must be a whole number >= 1`;
    }
    for (const name of POSITIVE_FIELDS) {
      if (!(isNumber(c[name]) && c[name] > 0)) return `${name} must be a number > 0`;
    }
    for (const name of NON_NEGATIVE_FIELDS) {
      if (!(isNumber(c[name]) && c[name] >= 0)) return `${name} must be a number >= 0`;
    }
    if (c.compute_efficiency !== null &&
        !(isNumber(c.compute_efficiency) && c.compute_efficiency > 0 && c.compute_efficiency <= 1)) {
      return "compute_efficiency must be in (0, 1] (or empty: calibrated)";
    }
    if (![0, 1, 2, 3].includes(c.zero_stage)) return "zero_stage must be 0, 1, 2 or 3";
    if (!RECOMPUTE.includes(c.recompute)) return "recompute must be none, selective or full";
    if (!SCHEDULES.includes(c.schedule)) return "schedule must be 1f1b or gpipe";
    for (const name of ["sequence_parallel", "overlap_dp", "gated_mlp", "tied_embeddings"]) {
      if (typeof c[name] !== "boolean") return `${name} must be true or false`;
    }
    if (c.hidden % c.heads) return "hidden must be divisible by heads";
    if (c.heads % c.kv_heads) {
      return "heads must be divisible by kv_heads (each KV head serves a whole group of query heads)";
    }
    if (c.heads % c.tp) return "heads must be divisible by tp (tensor parallelism splits the attention heads)";
    if (c.layers % (c.pp * c.interleave)) {
      return "layers must be divisible by pp x interleave (whole layers on every stage)";
    }
    if (c.interleave > 1 && (c.pp === 1 || c.schedule !== "1f1b")) {
      return "interleave > 1 needs pp > 1 and the 1f1b schedule";
    }
    if (c.interleave > 1 && c.microbatches % c.pp) {
      return "the interleaved schedule needs microbatches to be a multiple of pp";
    }
    return "";
  }

  function checked(cfg) {
    const c = asConfig(cfg);
    const message = problem(c);
    if (message) throw new Error(message);
    return c;
  }

  // -- memory ---------------------------------------------------------------------------------------
  function paramsCount(layers, hidden, vocab) {
    return 12.0 * layers * hidden * hidden + vocab * hidden;
  }

  function layerParams(c) {
    const kvDim = c.hidden * c.kv_heads / c.heads;
    const mlpMatrices = c.gated_mlp ? 3.0 : 2.0;
    return 2.0 * c.hidden * c.hidden + 2.0 * c.hidden * kvDim + mlpMatrices * c.hidden * c.ffn_hidden;
  }

  function embeddingParams(c) {
    return (c.tied_embeddings ? 1.0 : 2.0) * c.vocab * c.hidden;
  }

  function configParams(cfg) {
    const c = asConfig(cfg);
    return c.layers * layerParams(c) + embeddingParams(c);
  }

  function activationBytesPerLayer(c) {
    const sbh = c.seq_len * c.microbatch_size * c.hidden;
    const t = c.tp;
    const attentionScores = 5.0 * c.heads * c.seq_len / c.hidden;
    const split = c.sequence_parallel || t === 1;
    if (c.recompute === "full") return split ? 2.0 * sbh / t : 2.0 * sbh;
    if (c.recompute === "selective") return split ? 34.0 * sbh / t : sbh * (10.0 + 24.0 / t);
    return split ? sbh * (34.0 + attentionScores) / t : sbh * (10.0 + 24.0 / t + attentionScores / t);
  }

  function microbatchesInFlight(c) {
    if (c.pp === 1) return 1.0;
    if (c.schedule === "gpipe") return c.microbatches;
    if (c.interleave === 1) return Math.min(c.pp, c.microbatches);
    return Math.min(c.pp + (c.pp - 1) / c.interleave, c.microbatches);
  }

  function memoryPerGpu(cfg) {
    const c = checked(cfg);
    const paramsTotal = configParams(c);
    const paramsPerGpu = paramsTotal / (c.tp * c.pp);
    const weights = WEIGHT_BYTES * paramsPerGpu / (c.zero_stage >= 3 ? c.dp : 1);
    const grads = GRAD_BYTES * paramsPerGpu / (c.zero_stage >= 2 ? c.dp : 1);
    const optimizer = OPTIMIZER_BYTES * paramsPerGpu / (c.zero_stage >= 1 ? c.dp : 1);
    const perLayer = activationBytesPerLayer(c);
    const inFlight = microbatchesInFlight(c);
    const activations = perLayer * (c.layers / c.pp) * inFlight;
    const total = weights + grads + optimizer + activations;
    const capacity = c.gpu_memory_gb * GB;
    return {
      params_total: paramsTotal,
      params_per_gpu: paramsPerGpu,
      weights_bytes: weights,
      grads_bytes: grads,
      optimizer_bytes: optimizer,
      model_states_bytes: weights + grads + optimizer,
      activation_bytes_per_layer: perLayer,
      microbatches_in_flight: inFlight,
      activations_bytes: activations,
      total_bytes: total,
      capacity_bytes: capacity,
      fits: total <= capacity,
    };
  }

  // -- communication --------------------------------------------------------------------------------
  function link(c, groupSize, stride) {
    if (groupSize === 1) return "none";
    return groupSize * stride <= c.gpus_per_node ? "intra" : "inter";
  }

  // How many of a node's NICs one collective of the group drives when it spans nodes (one per member in a node).
  function nics(c, groupSize, stride) {
    return Math.max(1, Math.min(groupSize, Math.floor(c.gpus_per_node / stride)));
  }

  function alphaBeta(c, which, nicCount) {
    if (which === "intra") return [c.intra_alpha_us * US, 1.0 / (c.intra_bandwidth_gbs * GB)];
    const bandwidth = Math.min(c.intra_bandwidth_gbs, c.inter_bandwidth_gbs * nicCount);
    return [c.inter_alpha_us * US, 1.0 / (bandwidth * GB)];
  }

  // Every communication of one step for one GPU: [count, kind, bytes n, group size, link, NICs].
  function parts(c) {
    const sbh = c.seq_len * c.microbatch_size * c.hidden;
    const paramsPerGpu = configParams(c) / (c.tp * c.pp);
    const m = c.microbatches;
    const tpLink = link(c, c.tp, 1), ppLink = link(c, c.pp, c.tp), dpLink = link(c, c.dp, c.tp * c.pp);
    const tpNics = nics(c, c.tp, 1), dpNics = nics(c, c.dp, c.tp * c.pp);
    const tpPerLayer = c.recompute === "full" ? 6 : 4;
    const tp = c.tp > 1 ? [[(c.layers / c.pp) * m * tpPerLayer, "all_reduce", 2.0 * sbh, c.tp, tpLink, tpNics]] : [];
    const pp = c.pp > 1 ? [[2.0 * m * c.interleave, "p2p", 2.0 * sbh / c.tp, 2, ppLink, 1]] : [];
    const grads = 2.0 * paramsPerGpu;
    let dp = [];
    if (c.dp > 1) {
      if (c.zero_stage === 0) dp = [[1.0, "all_reduce", grads, c.dp, dpLink, dpNics]];
      else if (c.zero_stage === 1) {
        dp = [[1.0, "reduce_scatter", grads, c.dp, dpLink, dpNics], [1.0, "all_gather", grads, c.dp, dpLink, dpNics]];
      } else if (c.zero_stage === 2) {
        dp = [[m, "reduce_scatter", grads, c.dp, dpLink, dpNics], [1.0, "all_gather", grads, c.dp, dpLink, dpNics]];
      } else {
        dp = [[2.0 * m, "all_gather", grads, c.dp, dpLink, dpNics], [m, "reduce_scatter", grads, c.dp, dpLink, dpNics]];
      }
    }
    return { tp: [tp, tpLink], pp: [pp, ppLink], dp: [dp, dpLink] };
  }

  function volume(items) {
    let total = 0.0;
    for (const [count, kind, n, p] of items) total += count * (kind === "p2p" ? n : bytesSentPerRank(kind, n, p));
    return total;
  }

  function seconds(c, items) {
    let total = 0.0;
    for (const [count, kind, n, p, which, nicCount] of items) {
      const [alpha, beta] = alphaBeta(c, which, nicCount);
      total += count * (kind === "p2p" ? alpha + n * beta : collectiveTime(kind, n, p, alpha, beta));
    }
    return total;
  }

  function commVolume(cfg) {
    const c = checked(cfg);
    const all = parts(c);
    const out = {};
    for (const name of ["tp", "pp", "dp"]) {
      const [items, which] = all[name];
      out[`${name}_bytes`] = volume(items);
      out[`${name}_ops`] = items.reduce((sum, item) => sum + item[0], 0);
      out[`${name}_link`] = which;
    }
    out.total_bytes = out.tp_bytes + out.pp_bytes + out.dp_bytes;
    return out;
  }

  function bubble(cfg) {
    const c = checked(cfg);
    if (c.pp === 1) return { over_ideal: 0.0, fraction: 0.0 };
    const vM = c.interleave * c.microbatches;
    return { over_ideal: (c.pp - 1) / vM, fraction: (c.pp - 1) / (vM + c.pp - 1) };
  }

  function flopsPerToken(cfg) {
    const c = asConfig(cfg);
    const inputEmbedding = c.tied_embeddings ? 0.0 : c.vocab * c.hidden;
    const attention = 12.0 * c.layers * c.hidden * c.seq_len;
    const model = 6.0 * (configParams(c) - inputEmbedding) + attention;
    let extra = 0.0;
    if (c.recompute === "full") extra = 2.0 * c.layers * layerParams(c) + attention / 3.0;
    else if (c.recompute === "selective") extra = attention / 3.0;
    return { model: model, hardware: model + extra, attention: attention };
  }

  function calibratedEfficiency(hidden) {
    const table = EFFICIENCY_BY_HIDDEN;
    if (hidden <= table[0][0]) return table[0][1];
    for (let i = 0; i + 1 < table.length; i++) {
      const [h0, e0] = table[i], [h1, e1] = table[i + 1];
      if (hidden <= h1) return e0 + (e1 - e0) * (hidden - h0) / (h1 - h0);
    }
    return table[table.length - 1][1];
  }

  function efficiency(c) {
    return c.compute_efficiency === null ? calibratedEfficiency(c.hidden) : c.compute_efficiency;
  }

  function stepTime(cfg) {
    const c = checked(cfg);
    const gpus = c.tp * c.pp * c.dp;
    const tokens = c.microbatches * c.microbatch_size * c.seq_len * c.dp;
    const perToken = flopsPerToken(c);
    const flops = perToken.hardware * tokens;
    const eff = efficiency(c);
    const compute = flops / (gpus * c.peak_tflops * 1e12 * eff);
    const all = parts(c);
    const tpS = seconds(c, all.tp[0]);
    const ppS = seconds(c, all.pp[0]);
    const dpS = seconds(c, all.dp[0]);
    let dpExposed = dpS;
    if (c.overlap_dp) {
      let window;
      if (c.zero_stage <= 1) window = (2.0 / 3.0) * compute / c.microbatches;
      else if (c.zero_stage === 2) window = (2.0 / 3.0) * compute;
      else window = compute;
      dpExposed = Math.max(0.0, dpS - window);
    }
    const bubbleS = (compute + tpS) * bubble(c).over_ideal;
    const total = compute + tpS + ppS + dpExposed + bubbleS;
    const peak = total * gpus * c.peak_tflops * 1e12;
    return {
      gpus: gpus,
      tokens: tokens,
      flops: flops,
      model_flops: perToken.model * tokens,
      compute_efficiency: eff,
      compute_s: compute,
      tp_comm_s: tpS,
      pp_comm_s: ppS,
      dp_comm_s: dpS,
      dp_exposed_s: dpExposed,
      bubble_s: bubbleS,
      total_s: total,
      tokens_per_s: tokens / total,
      mfu: perToken.model * tokens / peak,
      hfu: flops / peak,
    };
  }

  // -- the form on the page (docs/includes/parallel-calculator.html) ---------------------------------
  const FORM_ID = "parallel-calculator";
  const INPUTS = {  // config field -> element id, for the numeric inputs
    layers: "pc-layers", hidden: "pc-hidden", heads: "pc-heads", kv_heads: "pc-kv-heads", ffn_hidden: "pc-ffn-hidden",
    vocab: "pc-vocab",
    seq_len: "pc-seq-len", microbatch_size: "pc-microbatch-size", microbatches: "pc-microbatches",
    tp: "pc-tp", pp: "pc-pp", interleave: "pc-interleave", gpus_per_node: "pc-gpus-per-node",
    gpu_memory_gb: "pc-gpu-memory", peak_tflops: "pc-peak-tflops", compute_efficiency: "pc-compute-efficiency",
    intra_bandwidth_gbs: "pc-intra-bandwidth", intra_alpha_us: "pc-intra-alpha",
    inter_bandwidth_gbs: "pc-inter-bandwidth", inter_alpha_us: "pc-inter-alpha",
  };
  const OUTPUT_IDS = ["pc-dp", "pc-memory-total", "pc-memory-weights", "pc-memory-grads", "pc-memory-optimizer",
    "pc-memory-activations", "pc-memory-fits", "pc-comm-tp", "pc-comm-pp", "pc-comm-dp", "pc-comm-total",
    "pc-bubble", "pc-step-total", "pc-step-compute", "pc-step-tp", "pc-step-pp", "pc-step-dp", "pc-step-bubble",
    "pc-step-mfu", "pc-step-tokens"];

  const fmtGB = (bytes) => `${(bytes / GB).toFixed(2)} GB`;
  const fmtS = (s) => (s >= 1 ? `${s.toFixed(2)} s` : `${(s * 1e3).toFixed(1)} ms`);
  const fmtPct = (x) => `${(100 * x).toFixed(1)}%`;

  function numberFrom(el) {
    const text = (el.value || "").trim();
    return text === "" ? NaN : Number(text);
  }

  function readForm(root) {
    const $ = (id) => root.querySelector(`#${id}`);
    const cfg = {};
    for (const [field, id] of Object.entries(INPUTS)) cfg[field] = numberFrom($(id));
    cfg.zero_stage = Number($("pc-zero-stage").value);
    cfg.recompute = $("pc-recompute").value;
    cfg.schedule = $("pc-schedule").value;
    cfg.sequence_parallel = $("pc-sequence-parallel").checked;
    cfg.overlap_dp = $("pc-overlap-dp").checked;
    cfg.gated_mlp = $("pc-gated-mlp").checked;
    cfg.tied_embeddings = $("pc-tied-embeddings").checked;
    if (($("pc-compute-efficiency").value || "").trim() === "") cfg.compute_efficiency = null;  // calibrated
    return { cfg: cfg, gpus: numberFrom($("pc-gpus")) };
  }

  function show(root, values, message) {
    for (const id of OUTPUT_IDS) {
      const el = root.querySelector(`#${id}`);
      if (el) el.textContent = values ? values[id] : "–";
    }
    const error = root.querySelector("#pc-error");
    error.textContent = message || "";
    error.hidden = !message;
  }

  // The form's largest number: far above any real model or cluster, and low enough that every result stays
  // finite (1e308 would print "Infinity ms" and "NaN%"). The smallest is each field's rule in problem().
  const FORM_MAX = 1e7;

  function update(root) {
    const { cfg, gpus } = readForm(root);
    for (const [field, value] of [["GPUs", gpus], ...Object.entries(cfg)]) {
      if (typeof value === "number" && value > FORM_MAX) {  // too small: problem() names the field's own rule
        return show(root, null, `${field} is out of range: enter a value of at most ${FORM_MAX.toLocaleString("en-US")}`);
      }
    }
    if (!isWhole(gpus)) return show(root, null, "GPUs must be a whole number >= 1");
    if (!isWhole(cfg.tp) || !isWhole(cfg.pp)) return show(root, null, problem(cfg));
    if (gpus % (cfg.tp * cfg.pp)) {
      return show(root, null, `GPUs (${gpus}) must be divisible by TP x PP (${cfg.tp * cfg.pp}): DP = GPUs / (TP x PP)`);
    }
    cfg.dp = gpus / (cfg.tp * cfg.pp);
    const message = problem(cfg);
    if (message) return show(root, null, message);
    const mem = memoryPerGpu(cfg), comm = commVolume(cfg), pipe = bubble(cfg), step = stepTime(cfg);
    const values = {
      "pc-dp": String(cfg.dp),
      "pc-memory-total": `${fmtGB(mem.total_bytes)} of ${fmtGB(mem.capacity_bytes)}`,
      "pc-memory-weights": fmtGB(mem.weights_bytes),
      "pc-memory-grads": fmtGB(mem.grads_bytes),
      "pc-memory-optimizer": fmtGB(mem.optimizer_bytes),
      "pc-memory-activations": fmtGB(mem.activations_bytes),
      "pc-memory-fits": mem.fits ? "yes" : "no: does not fit",
      "pc-comm-tp": `${fmtGB(comm.tp_bytes)} (${comm.tp_link})`,
      "pc-comm-pp": `${fmtGB(comm.pp_bytes)} (${comm.pp_link})`,
      "pc-comm-dp": `${fmtGB(comm.dp_bytes)} (${comm.dp_link})`,
      "pc-comm-total": fmtGB(comm.total_bytes),
      "pc-bubble": `${fmtPct(pipe.fraction)} of the pipeline's time`,
      "pc-step-total": fmtS(step.total_s),
      "pc-step-compute": fmtS(step.compute_s),
      "pc-step-tp": fmtS(step.tp_comm_s),
      "pc-step-pp": fmtS(step.pp_comm_s),
      "pc-step-dp": `${fmtS(step.dp_exposed_s)} exposed of ${fmtS(step.dp_comm_s)}`,
      "pc-step-bubble": fmtS(step.bubble_s),
      "pc-step-mfu": `${fmtPct(step.mfu)} (compute efficiency ${fmtPct(step.compute_efficiency)}` +
        `${cfg.compute_efficiency === null ? ", calibrated" : ""})`,
      "pc-step-tokens": `${Math.round(step.tokens).toLocaleString("en-US")} tokens, ` +
        `${Math.round(step.tokens_per_s).toLocaleString("en-US")} tokens/s`,
    };
    for (const [id, text] of Object.entries(values)) {
      if (/NaN|Infinity/.test(text)) return show(root, null, "out of range: these inputs give no finite result");
    }
    show(root, values, "");
  }

  function setPreset(root, selectId, presets, fields) {
    const choice = presets[root.querySelector(`#${selectId}`).value];
    if (!choice) return;
    for (const [field, id] of Object.entries(fields)) {
      const el = root.querySelector(`#${id}`);
      if (typeof choice[field] === "boolean") el.checked = choice[field];
      else el.value = String(choice[field]);
    }
  }

  const MODEL_FIELDS = { layers: "pc-layers", hidden: "pc-hidden", heads: "pc-heads", kv_heads: "pc-kv-heads",
    ffn_hidden: "pc-ffn-hidden", gated_mlp: "pc-gated-mlp", tied_embeddings: "pc-tied-embeddings", vocab: "pc-vocab" };
  const INTRA_FIELDS = { bandwidth_gbs: "pc-intra-bandwidth", alpha_us: "pc-intra-alpha" };
  const INTER_FIELDS = { bandwidth_gbs: "pc-inter-bandwidth", alpha_us: "pc-inter-alpha" };

  function start() {
    const root = document.getElementById(FORM_ID);
    if (!root || root.dataset.ready) return;
    root.dataset.ready = "1";
    const $ = (id) => root.querySelector(`#${id}`);
    // A preset fills its fields; editing one of those fields by hand turns the preset to "custom".
    const presets = [["pc-model", MODELS, MODEL_FIELDS], ["pc-intra-link", LINKS, INTRA_FIELDS],
      ["pc-inter-link", LINKS, INTER_FIELDS]];
    for (const [selectId, choices, fields] of presets) {
      $(selectId).addEventListener("change", () => setPreset(root, selectId, choices, fields));
      for (const id of Object.values(fields)) {
        $(id).addEventListener("input", () => { $(selectId).value = "custom"; });
      }
    }
    // The hardware fields start at the defaults (the datasheet's figures; the page types none).
    setPreset(root, "pc-intra-link", LINKS, INTRA_FIELDS);
    setPreset(root, "pc-inter-link", LINKS, INTER_FIELDS);
    $("pc-gpu-memory").value = String(DEFAULTS.gpu_memory_gb);
    $("pc-peak-tflops").value = String(DEFAULTS.peak_tflops);
    root.addEventListener("input", () => update(root));
    root.addEventListener("change", () => update(root));
    root.addEventListener("submit", (e) => e.preventDefault());
    update(root);
  }

  window.ParallelCalc = {
    DEFAULTS, MODELS, LINKS, FEATURES, EFFICIENCY_BY_HIDDEN,
    problem, memoryPerGpu, commVolume, bubble, stepTime,
    paramsCount, configParams, flopsPerToken, calibratedEfficiency, collectiveTime, bytesSentPerRank,
    activationBytesPerLayer: (cfg) => activationBytesPerLayer(checked(cfg)),
    microbatchesInFlight: (cfg) => microbatchesInFlight(checked(cfg)),
    start,
  };

  // First load, and Material's instant navigation (document$ emits after every page swap).
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
  if (typeof window.document$ !== "undefined" && window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(() => start());
  }
})();
