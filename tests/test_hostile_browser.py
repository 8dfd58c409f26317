"""Hostile input in the browser (issue 31, item 10): the calculators answer huge, negative, empty and
non-finite inputs with one clear message, never "Infinity ms", "NaN%" or "NaN tokens/s"; practice mode
survives a localStorage entry of the wrong shape. Debian's Chromium through Playwright, no site build: the
pages' markup (docs/calculators.md, docs/includes/parallel-calculator.html, docs/practice.md) with the real
scripts, and not one request leaves the page."""

from __future__ import annotations

import json
import re

import pytest

from conftest import REPO, set_field
from test_calculators_browser import page_html
from website import site_pages

pytestmark = pytest.mark.slow

ASSETS = REPO / "docs" / "assets"
NOT_A_NUMBER = re.compile(r"NaN|Infinity|undefined")


def watch(pg) -> tuple[list, list]:
    errors, requests = [], []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("request", lambda r: requests.append(r.url))
    return errors, requests


def local_only(requests: list, origin: str = "") -> list:
    return [u for u in requests if not u.startswith(("about:", "data:")) and not (origin and u.startswith(origin))]


# -- the KV cache, training memory and serving calculators ----------------------------------------------

def calculator_page(chromium, html: str, script: str):
    """A page with a calculator's markup, the datasheet figures and its script; on leaving, no error and no
    request outside the page."""
    pg = chromium.new_page()
    errors, requests = watch(pg)
    pg.set_content(html)
    pg.add_script_tag(content=site_pages.datasheets_js())
    pg.add_script_tag(content=(ASSETS / script).read_text(encoding="utf-8"))
    yield pg
    pg.close()
    assert not errors, errors
    assert not local_only(requests), requests


@pytest.fixture(scope="module")
def calculators(chromium):
    yield from calculator_page(chromium, page_html(), "sizing-calculators.js")  # calculators.md's markup


def shown_text(pg, form: str) -> tuple[str, str]:
    """(the form's outputs, its error line) as the reader sees them."""
    outputs = pg.locator(f"#{form} dl").inner_text()
    error = pg.locator(f"#{form} .sc-error")
    return outputs, error.inner_text() if error.is_visible() else ""


CALCULATOR_FIELDS = [  # (form, field id, the label its message names)
    ("kv-calculator", "kv-context", "context"), ("kv-calculator", "kv-layers", "layers"),
    ("kv-calculator", "kv-batch", "batch"), ("kv-calculator", "kv-block-tokens", "block size"),
    ("training-calculator", "tm-params", "parameters"), ("training-calculator", "tm-seq-len", "sequence length"),
    ("training-calculator", "tm-dp", "DP"), ("training-calculator", "tm-gpu-memory-gb", "GPU memory"),
    ("serving-calculator", "sv-bandwidth-gbs", "bandwidth"), ("serving-calculator", "sv-memory-gb", "memory"),
    ("serving-calculator", "sv-params", "parameters"), ("serving-calculator", "sv-gpus", "GPUs"),
    ("serving-calculator", "sv-context", "context"),
]
HOSTILE_VALUES = ["1e308", "-1e308", "1e400", "-5", "", "1e30", "0.5e-320"]


@pytest.mark.parametrize("form, field, label", CALCULATOR_FIELDS)
def test_a_huge_negative_or_empty_input_is_one_message_never_nan(calculators, form, field, label):
    pg = calculators
    original = pg.locator(f"#{field}").input_value()
    for value in HOSTILE_VALUES:
        set_field(pg, field, value)
        outputs, error = shown_text(pg, form)
        assert not NOT_A_NUMBER.search(outputs + error), (field, value, outputs, error)
        assert error.startswith(f"{label} must be a "), (field, value, error)
        assert re.search(r"between [\d.,]+ and [\d,]+ \((empty|not a number it can hold|.* is out of range|"
                         r".* is not a whole number)\)$", error), (field, value, error)
        assert "–" in outputs  # the results show a dash, not a number from bad input
    set_field(pg, field, original)
    outputs, error = shown_text(pg, form)
    assert error == "" and "–" not in outputs, (field, outputs)  # back to numbers


def test_the_largest_allowed_inputs_still_give_finite_numbers(calculators):
    """Every field at its largest allowed value (and the serving bandwidth at its smallest) computes numbers."""
    pg = calculators
    fields = pg.evaluate("""() => [...document.querySelectorAll('.sc-calculator input[data-key]')].map((el) => {
        const value = el.value; el.value = '1e99'; el.dispatchEvent(new Event('input', {bubbles: true}));
        const message = el.closest('.sc-calculator').querySelector('.sc-error').textContent;
        el.value = value; el.dispatchEvent(new Event('input', {bubbles: true}));
        return [el.id, value, message]; })""")
    for element_id, _, message in fields:
        largest = re.search(r"and ([\d,]+) \(1e99 is out of range\)$", message).group(1)
        set_field(pg, element_id, largest.replace(",", ""))
    set_field(pg, "sv-bandwidth-gbs", "0.001")
    for form in ("kv-calculator", "training-calculator", "serving-calculator"):
        outputs, error = shown_text(pg, form)
        assert error == "" and "–" not in outputs and not NOT_A_NUMBER.search(outputs), (form, outputs, error)
    for element_id, value, _ in fields:
        set_field(pg, element_id, value)


def test_the_serving_calculator_at_1e308_bandwidth_says_out_of_range(calculators):
    pg = calculators
    original = pg.locator("#sv-bandwidth-gbs").input_value()
    set_field(pg, "sv-bandwidth-gbs", "1e308")
    outputs, error = shown_text(pg, "serving-calculator")
    assert error == "bandwidth must be a number between 0.001 and 10,000,000 (1e308 is out of range)"
    assert "ms" not in outputs and "tokens/s" not in outputs
    set_field(pg, "sv-bandwidth-gbs", original)


# -- the parallelism calculator ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def parallel(chromium):
    markup = (REPO / "docs" / "includes" / "parallel-calculator.html").read_text(encoding="utf-8")
    yield from calculator_page(chromium, "<!doctype html><html><body>" + markup + "</body></html>",
                               "parallel-calculator.js")


@pytest.mark.parametrize("field", ["pc-gpu-memory", "pc-peak-tflops", "pc-intra-bandwidth", "pc-seq-len",
                                   "pc-layers", "pc-gpus", "pc-intra-alpha", "pc-compute-efficiency"])
def test_the_parallel_calculator_never_shows_nan(parallel, field):
    pg = parallel
    original = pg.locator(f"#{field}").input_value()
    for value in HOSTILE_VALUES:
        set_field(pg, field, value)
        error = pg.locator("#pc-error").inner_text()
        outputs = pg.locator("#parallel-calculator").inner_text()
        assert not NOT_A_NUMBER.search(outputs), (field, value, outputs)
        if value in ("1e308", "1e30"):  # 1e400 is no number an input holds: the field reads as empty
            assert "is out of range: enter a value of at most 10,000,000" in error, (field, value, error)
    set_field(pg, field, original)
    assert pg.locator("#pc-error").is_hidden()


# -- practice mode and its localStorage ----------------------------------------------------------------

ORIGIN = "http://practice.test/"
CARDS = [{"id": f"T6-{i}", "kind": "question", "topic": "T6", "topic_title": "Serving", "difficulty": "medium",
          "question": f"Question T6-{i}", "answer": f"<p>Answer T6-{i}</p>", "measured": "", "url": "#"}
         for i in range(3)]
VALID_STATE = {"ease": 2.5, "interval": 4, "reps": 1, "lapses": 0, "due": 4102444800000, "last": 0, "grade": "easy"}


def practice_html() -> str:
    text = (REPO / "docs" / "practice.md").read_text(encoding="utf-8")
    widget = re.search(r'<div id="mm-practice".*?\n</div>', text, re.S).group(0)
    data = json.dumps(CARDS).replace("</", "<\\/")
    script = (ASSETS / "practice.js").read_text(encoding="utf-8")
    return (f"<!doctype html><html><head><meta charset='utf-8'></head><body>{widget}"
            f"<script type='application/json' id='mm-cards'>{data}</script>"
            f"<script>{script}</script></body></html>")


def open_practice(chromium, stored: dict[str, str]):
    """The practice page with ``stored`` (key -> raw text) in localStorage before its script runs."""
    context = chromium.new_context()
    body = practice_html()
    context.route(f"{ORIGIN}**", lambda route: route.fulfill(status=200, content_type="text/html", body=body))
    context.add_init_script("".join(f"localStorage.setItem({json.dumps(k)}, {json.dumps(v)});"
                                    for k, v in stored.items()))  # runs before the page's scripts (one load only)
    pg = context.new_page()
    errors, requests = watch(pg)
    pg.goto(ORIGIN)
    return context, pg, errors, requests


WRONG_SHAPES = ['{"a":1}', "5", "[]", "null", '"a string"', "true", '[{"id": 1}]', "not json {", '{"T6-0": 5}',
                '{"T6-0": {"ease": "x"}}', '{"T6-0": {"ease": null, "interval": 1, "reps": 1, "lapses": 0, "due": 1}}',
                '{"__proto__": {"due": 0}}', "1e400"]


@pytest.mark.parametrize("raw", WRONG_SHAPES)
def test_a_stored_entry_of_the_wrong_shape_starts_fresh(chromium, raw):
    context, pg, errors, requests = open_practice(chromium, {"mm-practice-known": raw, "mm-practice-schedule": raw})
    try:
        assert pg.locator("#mm-card-question").inner_text() == "Question T6-0"
        progress = pg.locator("#mm-progress").inner_text()
        assert progress.startswith("Card 1 of 3 · 0 of 3 marked known · 0 graded, 0 due now"), progress
        assert not NOT_A_NUMBER.search(pg.locator("#mm-practice").inner_text())
        pg.keyboard.press("Space")
        pg.keyboard.press("k")  # mark known, then grade: both stored in the right shape again
        pg.click("#mm-grade-good")
        known = pg.evaluate("() => JSON.parse(localStorage.getItem('mm-practice-known'))")
        states = pg.evaluate("() => JSON.parse(localStorage.getItem('mm-practice-schedule'))")
        assert known == ["T6-0"]
        assert list(states) == ["T6-0"] and states["T6-0"]["grade"] == "good"
        assert not errors, errors
        assert not local_only(requests, ORIGIN), requests
    finally:
        context.close()


def test_the_valid_parts_of_a_stored_entry_are_kept(chromium):
    states = {"T6-1": VALID_STATE, "T6-0": {"ease": "NaN"}, "T6-2": [1, 2], "gone": 5}
    context, pg, errors, requests = open_practice(chromium, {
        "mm-practice-known": json.dumps(["T6-2", 7, {"id": "T6-0"}, None]),
        "mm-practice-schedule": json.dumps(states)})
    try:
        progress = pg.locator("#mm-progress").inner_text()
        assert progress.startswith("Card 1 of 3 · 1 of 3 marked known · 1 graded, 0 due now"), progress
        pg.click("#mm-next")
        pg.click("#mm-next")  # the kept state puts T6-1 (due in 2100) last
        assert pg.locator("#mm-card-question").inner_text() == "Question T6-1"
        assert pg.locator(".mm-chip-later").is_visible()
        assert not errors, errors
    finally:
        context.close()


def test_practice_works_without_storage(chromium):
    """Storage that throws (disabled, or full) leaves practice mode working for the visit."""
    context = chromium.new_context()
    body = practice_html()
    context.route(f"{ORIGIN}**", lambda route: route.fulfill(status=200, content_type="text/html", body=body))
    context.add_init_script("""Object.defineProperty(window, 'localStorage', {get() {
        throw new DOMException('denied', 'SecurityError'); }});""")
    pg = context.new_page()
    errors, _ = watch(pg)
    try:
        pg.goto(ORIGIN)
        pg.keyboard.press("k")
        pg.click("#mm-grade-easy")
        assert "1 of 3 marked known · 1 graded" in pg.locator("#mm-progress").inner_text()
        assert not errors, errors
    finally:
        context.close()
