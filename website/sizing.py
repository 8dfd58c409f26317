"""Sizing problems (back-of-the-envelope questions) and the formulas behind the calculators.

One source of truth: the formulas call ``demos/common/cluster_model.py`` (activations, collectives,
pipeline bubble; pure Python) and the chip figures come from ``records/datasheets.toml``. The two
formulas that live in torch-importing demo modules are restated here so the check and the site build do
not import torch (seconds on every run), and tests/test_sizing.py requires them to equal the demos' own:
``demos/t6_inference/_model.py``'s ``Config.kv_cache_bytes`` and ``demos/t8_training/_gpt.py``'s
``model_state_bytes_per_param``. ``docs/assets/sizing-calculators.js`` is the
same formulas in JavaScript; tests/test_calculators_browser.py compares the two in Chromium.

The problems live in ``website/sizing_problems.toml``: each names a formula, its inputs (published
model configs and hardware figures, with their sources) and the answer its author *stated*, rounded.
A page shows a problem with the marker ``{{ sizing ID }}``: the statement, then the worked answer,
computed here at build time, folded until the reader opens it. ``python -m scripts.check`` fails when a
stated answer and the computation disagree (``stated_problems``).
"""

from __future__ import annotations

import html
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from demos.common import cluster_model as cm

PROBLEMS_FILE = Path(__file__).with_name("sizing_problems.toml")
GB = 1e9
GIB = 2**30
DAY = 86400.0

# -- formulas ---------------------------------------------------------------------------------------


def kv_cache(layers: int, kv_heads: int, head_dim: int, context: int, batch: int = 1, dtype_bytes: float = 2,
             block_tokens: int = 0) -> dict:
    """KV-cache bytes: layers x 2 (K and V) x KV heads x head_dim x bytes per token, per sequence (the
    formula of the T6 demo, ``_model.Config.kv_cache_bytes``). With paging (``block_tokens`` > 0) each
    sequence holds whole blocks: ceil(context / block) x block tokens, and the rest of its last block is waste."""
    per_token = float(layers * 2 * kv_heads * head_dim) * dtype_bytes  # = _model.Config.kv_cache_bytes(1, 1, 1) x bytes
    exact = per_token * context * batch
    held = math.ceil(context / block_tokens) * block_tokens if block_tokens > 0 else context
    allocated = per_token * held * batch
    return {"bytes_per_token": per_token, "bytes": exact, "allocated_bytes": allocated,
            "waste_bytes": allocated - exact, "waste_fraction": (allocated - exact) / allocated if allocated else 0.0}


OPTIMIZER_MOMENTS = {"adam": 2, "sgd_momentum": 1, "sgd": 0}  # fp32 tensors the optimizer keeps per parameter
PRECISIONS = ("mixed", "fp32")
STATE_BYTES = {"mixed": {"weights": 2, "grads": 2, "optimizer": 12},  # = _gpt.model_state_bytes_per_param
               "fp32": {"weights": 4, "grads": 4, "optimizer": 8}}


def state_bytes_per_param(precision: str, optimizer: str) -> dict:
    """Bytes per parameter of weights, gradients and optimizer states. For Adam these are the T8 demo's
    (``_gpt.model_state_bytes_per_param``: ZeRO paper, 2 + 2 + 12 mixed, 4 + 4 + 8 fp32); a lighter
    optimizer keeps 4 bytes fewer per fp32 moment it drops."""
    base = dict(STATE_BYTES[precision])
    base["optimizer"] -= 4 * (OPTIMIZER_MOMENTS["adam"] - OPTIMIZER_MOMENTS[optimizer])
    return base


def training_memory(params: float, layers: int, hidden: int, heads: int, seq_len: int, microbatch_size: int = 1,
                    microbatches: int = 1, precision: str = "mixed", optimizer: str = "adam", zero_stage: int = 0,
                    dp: int = 1, tp: int = 1, pp: int = 1, recompute: str = "none", gpu_memory_gb: float = 80.0) -> dict:
    """Bytes per GPU of a training layout: model states (sharded by TP x PP, and by DP under ZeRO 1/2/3)
    plus the activations of the first pipeline stage (cluster_model: Korthikanti et al. per layer, 1F1B,
    sequence parallelism with TP). Activations are counted in 16 bits; fp32 training doubles them (a slight
    over-count: Korthikanti's 1-byte dropout masks stay 1 byte, so it is 66 s b h rather than 68 per layer)."""
    per = state_bytes_per_param(precision, optimizer)
    shard = params / (tp * pp)
    weights = per["weights"] * shard / (dp if zero_stage >= 3 else 1)
    grads = per["grads"] * shard / (dp if zero_stage >= 2 else 1)
    optimizer_b = per["optimizer"] * shard / (dp if zero_stage >= 1 else 1)
    c = _cm_config(layers=layers, hidden=hidden, heads=heads, seq_len=seq_len, microbatch_size=microbatch_size,
                  microbatches=microbatches, tp=tp, pp=pp, dp=dp, recompute=recompute)
    act_scale = 2.0 if precision == "fp32" else 1.0
    per_layer = cm.activation_bytes_per_layer(c) * act_scale
    in_flight = cm.microbatches_in_flight(c)
    activations = per_layer * (layers / pp) * in_flight
    total = weights + grads + optimizer_b + activations
    return {"weights_bytes": weights, "grads_bytes": grads, "optimizer_bytes": optimizer_b,
            "model_states_bytes": weights + grads + optimizer_b, "activation_bytes_per_layer": per_layer,
            "microbatches_in_flight": in_flight, "activations_bytes": activations, "total_bytes": total,
            "fits": total <= gpu_memory_gb * GB}


def serving(params: float, weight_bytes: float, gpus: int, bandwidth_gbs: float, memory_gb: float, batch: int,
            context: int, layers: int, kv_heads: int, head_dim: int, kv_bytes: float = 2) -> dict:
    """Decode bounds from memory traffic: every step reads all weights once and each sequence's KV cache
    (at ``context`` tokens), spread over ``gpus`` GPUs' bandwidth. Max batch: the sequences whose caches
    fit in the memory the weights leave (no activations, no fragmentation: an upper bound). With tensor
    parallelism over more GPUs than there are KV heads, each GPU still holds at least one KV head, so the
    cache is replicated gpus / kv_heads times (as Megatron-LM and vLLM do)."""
    weights = params * weight_bytes
    replicas = gpus / min(gpus, kv_heads) if kv_heads > 0 else 1.0
    kv_seq = kv_cache(layers, kv_heads, head_dim, context, 1, kv_bytes)["bytes"] * replicas
    step_bytes = weights + batch * kv_seq
    step_s = step_bytes / (gpus * bandwidth_gbs * GB)
    free = gpus * memory_gb * GB - weights
    max_batch = max(0, math.floor(free / kv_seq)) if kv_seq > 0 else 0
    return {"weights_bytes": weights, "kv_bytes_per_sequence": kv_seq, "kv_replicas": replicas, "step_bytes": step_bytes, "step_s": step_s,
            "tokens_per_s": batch / step_s, "tokens_per_s_per_sequence": 1.0 / step_s, "free_bytes": free,
            "max_batch": max_batch, "fits": batch <= max_batch}


def all_reduce(n_bytes: float, gpus: int, link: str) -> dict:
    """Ring all-reduce in the alpha-beta model of cluster_model, over one of its link presets."""
    lk = cm.LINKS[link]
    a, b = cm.all_reduce_features(n_bytes, gpus)
    seconds = cm.collective_time("all_reduce", n_bytes, gpus, lk.alpha_s, lk.beta_s_per_byte)
    return {"bytes_sent_per_gpu": b, "latency_terms": a, "bandwidth_gbs": lk.bandwidth_gbs, "alpha_us": lk.alpha_us,
            "seconds": seconds}


def datasheet(device: str) -> dict:
    from records import datasheets

    return datasheets.sheets()[device]


def ridge_point(device: str, dtype: str) -> dict:
    """FLOPs per byte where the roofline's two roofs meet: datasheet peak / memory bandwidth
    (records.datasheets.ridge_point, the one place the ratio is computed)."""
    from records import datasheets

    sheet = datasheet(device)
    return {"peak_tflops": sheet["tflops"][dtype], "bandwidth_gbs": sheet["memory_gbps"],
            "flop_per_byte": datasheets.ridge_point(device, dtype)}


def training_days(params: float, tokens: float, gpus: int, peak_tflops: float, mfu: float) -> dict:
    """6 N D training FLOPs at a model-FLOPs utilisation ``mfu`` of the GPUs' peak."""
    flops = 6.0 * params * tokens
    seconds = flops / (gpus * peak_tflops * 1e12 * mfu)
    return {"flops": flops, "seconds": seconds, "days": seconds / DAY}


def pipeline_bubble(stages: int, microbatches: int, interleave: int = 1) -> dict:
    """cluster_model's bubble: idle / ideal = (p-1)/(v m), share of the pipeline's time (p-1)/(v m + p-1)."""
    c = _cm_config(layers=stages * interleave, hidden=1, heads=1, vocab=1, pp=stages, microbatches=microbatches,
                  interleave=interleave)
    return cm.bubble(c)


def arithmetic_intensity_decode(batch: int, weight_bytes: float) -> dict:
    """A decode step's matmuls: 2 FLOPs per parameter per sequence over the weight bytes read once."""
    return {"flop_per_byte": 2.0 * batch / weight_bytes}


def _cm_config(**fields) -> "cm.Config":
    """A cluster_model Config from the fields this module uses; where that Config has grouped-query
    attention (kv_heads), full heads, so the other fields keep their meaning."""
    names = {f.name for f in __import__("dataclasses").fields(cm.Config)}
    if "kv_heads" in names:
        fields.setdefault("kv_heads", fields.get("heads", 1))
    return cm.Config(**{k: v for k, v in fields.items() if k in names})


FORMULAS = {"kv_cache": kv_cache, "training_memory": training_memory, "serving": serving,
            "all_reduce": all_reduce, "ridge_point": ridge_point, "training_days": training_days,
            "pipeline_bubble": pipeline_bubble, "decode_intensity": arithmetic_intensity_decode}

# -- problems ---------------------------------------------------------------------------------------


@dataclass
class Problem:
    id: str
    title: str
    topic: str  # a topic page's file name under docs/topics/ (without .md)
    difficulty: str
    question: str  # Markdown
    formula: str
    inputs: dict
    given: list  # Markdown lines: the published figures, each with its source
    answer: str  # the result key the answer reads
    unit: str  # shown unit
    scale: float  # result / scale is in ``unit``
    stated: str  # the author's rounded answer, in ``unit``
    steps: list = field(default_factory=list)  # Markdown lines with {name} placeholders (results and inputs)
    note: str = ""


DATASHEET_REF = re.compile(r"datasheet:([a-z0-9\-]+)\.([a-z_]+)(?:\.([a-z0-9_]+))?")


def resolve(value, where: str):
    """An input written "datasheet:h100.memory_gbps" or "datasheet:h100.tflops.bfloat16" is read from
    records/datasheets.toml, so a chip figure has one source."""
    if not isinstance(value, str) or not value.startswith("datasheet:"):
        return value
    m = DATASHEET_REF.fullmatch(value)
    if not m:
        raise ValueError(f"{where}: write datasheet:DEVICE.FIELD[.DTYPE], not {value!r}")
    from records import datasheets

    sheet = datasheets.sheets().get(m.group(1))
    try:
        out = sheet[m.group(2)]
        return float(out[m.group(3)] if m.group(3) else out)
    except (KeyError, TypeError):
        raise ValueError(f"{where}: records/datasheets.toml has no {value.removeprefix('datasheet:')}") from None


def load_problems(path: Path = PROBLEMS_FILE) -> dict[str, Problem]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    problems = {}
    for pid, p in data.items():
        if pid in problems:
            raise ValueError(f"{path.name}: problem {pid!r} twice")
        try:
            problems[pid] = Problem(id=pid, title=p["title"], topic=p["topic"], difficulty=p["difficulty"],
                                    question=p["question"], formula=p["formula"],
                                    inputs={k: resolve(v, f"{path.name}: {pid}.inputs.{k}") for k, v in p["inputs"].items()},
                                    given=list(p.get("given", [])), answer=p["answer"], unit=p.get("unit", ""),
                                    scale=float(p.get("scale", 1.0)), stated=str(p["stated"]),
                                    steps=list(p.get("steps", [])), note=p.get("note", ""))
        except KeyError as e:
            raise ValueError(f"{path.name}: problem {pid!r} has no {e.args[0]!r}") from None
        if p["formula"] not in FORMULAS:
            raise ValueError(f"{path.name}: problem {pid!r}: unknown formula {p['formula']!r} "
                             f"(known: {', '.join(FORMULAS)})")
    return problems


def compute(problem: Problem) -> dict:
    return FORMULAS[problem.formula](**problem.inputs)


def computed_answer(problem: Problem) -> float:
    result = compute(problem)
    if problem.answer not in result:
        raise ValueError(f"problem {problem.id!r}: formula {problem.formula} gives no {problem.answer!r} "
                         f"(it gives {', '.join(result)})")
    return float(result[problem.answer]) / problem.scale


def stated_tolerance(stated: str) -> float:
    """Half a unit in the stated answer's last digit: '21.5' -> 0.05, '137' -> 0.5, '1,200' -> 0.5."""
    text = stated.replace(",", "").strip()
    if not re.fullmatch(r"-?\d+(\.\d+)?", text):
        raise ValueError(f"stated answer {stated!r} is not a plain number (digits, at most one point)")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 0.5 * 10.0 ** -decimals


def disagreement(problem: Problem) -> str:
    """'' when the stated answer is the computed one rounded to the stated digits; else why not."""
    try:
        value = computed_answer(problem)
        tol = stated_tolerance(problem.stated)
    except (ValueError, TypeError, KeyError) as e:
        return str(e)
    stated = float(problem.stated.replace(",", ""))
    if abs(value - stated) > tol * (1 + 1e-9):
        return (f"problem {problem.id!r}: stated answer {problem.stated} {problem.unit} but the computation gives "
                f"{value:.6g} {problem.unit} (the stated digits allow +/- {tol:g})")
    return ""


def stated_problems(path: Path = PROBLEMS_FILE) -> list[str]:
    """Every disagreement between a stated answer and its computation (the check's rule)."""
    try:
        problems = load_problems(path)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        return [f"{path.name}: {e}"]
    return [msg for p in problems.values() if (msg := disagreement(p))]


# -- rendering --------------------------------------------------------------------------------------


SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def fmt(value) -> str:
    """A readable number: thousands separators for large ones, 3-4 significant digits otherwise."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    v = float(value)
    if v == 0:
        return "0"
    if abs(v) >= 1e15 or abs(v) < 1e-3:
        mantissa, exponent = f"{v:.3e}".split("e")
        return f"{float(mantissa):g} × 10" + str(int(exponent)).translate(SUPERSCRIPT)
    if v.is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    if abs(v) >= 100:
        return f"{v:,.1f}"
    return f"{v:.4g}"


class _Values(dict):
    def __missing__(self, key):
        raise KeyError(key)


def step_values(problem: Problem) -> dict:
    """What a step line may name: every input and result (formatted), plus result/GB etc. derived ones."""
    result = compute(problem)
    values = _Values()
    for source in (problem.inputs, result):
        for k, v in source.items():
            values[k] = fmt(v)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                values[k + "_gb"] = fmt(v / GB)
                values[k + "_gib"] = fmt(v / GIB)
                values[k + "_ms"] = fmt(v * 1e3)
                values[k + "_us"] = fmt(v * 1e6)
                values[k + "_pct"] = fmt(100 * v)
                values[k + "_b"] = fmt(v / 1e9)
                values[k + "_kib"] = fmt(v / 1024)
    values["answer"] = fmt(computed_answer(problem))
    values["unit"] = problem.unit
    return values


def render_problem(problem: Problem, number: int | None = None) -> str:
    """The problem as Markdown: heading, question, the given figures with sources, the worked answer folded."""
    values = step_values(problem)
    try:
        steps = [s.format_map(values) for s in problem.steps]
    except KeyError as e:
        raise ValueError(f"problem {problem.id!r}: a step names {e.args[0]!r}, which is neither an input nor a "
                         f"result of {problem.formula}") from None
    heading = f"### {problem.title}" if number is None else f"### {number}. {problem.title}"
    out = [f'{heading} {{ #{problem.id} }}', "",
           f"*{problem.difficulty} · topic: [{problem.topic.replace('-', ' ')}](topics/{problem.topic}.md)*", "",
           problem.question.strip(), ""]
    if problem.given:
        out.append("Given:")
        out.append("")
        out += [f"- {g}" for g in problem.given]
        out.append("")
    out.append('??? success "Answer"')
    out.append("")
    for i, s in enumerate(steps, 1):
        out.append(f"    {i}. {s}")
    out.append("")
    out.append(f"    **Answer: {values['answer']} {problem.unit}** (stated, rounded: {problem.stated} "
               f"{problem.unit}; computed by `website/sizing.py` `{problem.formula}` at build time).")
    if problem.note:
        out.append("")
        out.append("    " + problem.note.strip().replace("\n", "\n    "))
    out.append("")
    return "\n".join(out)


SIZING_MARKER = re.compile(r"\{\{\s*sizing\s+([A-Za-z0-9_\-]+)\s*\}\}")


def expand(markdown: str, page_src_uri: str = "page") -> str:
    """Replace every {{ sizing ID }} marker outside code with the rendered problem (numbered in page order)."""
    if not SIZING_MARKER.search(markdown):
        return markdown
    from website.markers import transform_outside_code

    problems = load_problems()
    counter = [0]
    prefix = "../" * page_src_uri.count("/")

    def one(m: re.Match) -> str:
        pid = m.group(1)
        if pid not in problems:
            raise ValueError(f"{page_src_uri}: {m.group(0)}: no problem {pid!r} in website/sizing_problems.toml")
        counter[0] += 1
        text = render_problem(problems[pid], counter[0])
        return text.replace("](topics/", f"]({prefix}topics/")

    return transform_outside_code(markdown, lambda chunk: SIZING_MARKER.sub(one, chunk))


def markers_in(markdown: str) -> list[str]:
    from website.markers import transform_outside_code

    found: list[str] = []
    transform_outside_code(markdown, lambda chunk: (found.extend(SIZING_MARKER.findall(chunk)), chunk)[1])
    return found


def practice_cards(to_html, url_dir: str, titles: dict[str, tuple[str, str]], page: str = "sizing") -> list[dict]:
    """One practice card per problem: the question and given figures; the answer is the worked steps.
    ``titles`` maps a topic page's stem to (its topic id, its title)."""
    import posixpath

    url = posixpath.relpath(page, url_dir or ".") + "/"
    cards = []
    for p in load_problems().values():
        topic, title = titles.get(p.topic, ("", p.topic))
        body = render_problem(p).split("\n", 1)[1]  # without the heading
        question_md, answer_md = body.split('??? success "Answer"', 1)
        question_md = re.sub(r"^\*[a-z]+ · topic: .*\*$", "", question_md, count=1, flags=re.M)  # the card shows both
        answer_md = "\n".join(line[4:] if line.startswith("    ") else line for line in answer_md.splitlines())
        cards.append({"id": f"sizing-{p.id}", "kind": "sizing", "topic": topic, "topic_title": title,
                      "difficulty": p.difficulty, "url": url, "anchor": p.id, "measured": "",
                      "question": f"<strong>{html.escape(p.title)}</strong>" + '<div class="mm-card-detail">' + to_html(
                          question_md.replace("](topics/", f"]({posixpath.relpath('topics', url_dir or '.')}/")
                          .replace(".md)", "/)"), None) + "</div>",
                      "answer": to_html(answer_md, None)})
    return cards
