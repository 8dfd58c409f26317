"""Practice mode's spaced schedule (docs/assets/practice.js) in Chromium, and the cards it is fed.

No site build: the practice page's markup (docs/practice.md) with a handful of cards is served from a
routed origin (localStorage needs one), with the real practice.js."""

from __future__ import annotations

import json
import re

import pytest

from conftest import REPO
from website import sizing

pytestmark = pytest.mark.slow

JS = REPO / "docs" / "assets" / "practice.js"
ORIGIN = "http://practice.test/"
CARDS = [
    {"id": f"{topic}-{i}", "kind": kind, "topic": topic, "topic_title": title, "difficulty": "medium",
     "question": f"Question {topic}-{i}", "answer": f"<p>Answer {topic}-{i}</p>", "measured": "", "url": "#"}
    for topic, title, kind, n in (("T6", "Serving", "question", 3), ("T7", "Parallelism", "sizing", 2))
    for i in range(n)
]


def practice_html() -> str:
    text = (REPO / "docs" / "practice.md").read_text(encoding="utf-8")
    widget = re.search(r'<div id="mm-practice".*?\n</div>', text, re.S).group(0)
    data = json.dumps(CARDS).replace("</", "<\\/")
    return (f"<!doctype html><html><body>{widget}<script type='application/json' id='mm-cards'>{data}</script>"
            f"<script>{JS.read_text(encoding='utf-8')}</script></body></html>")


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    body = practice_html()
    context.route(f"{ORIGIN}**", lambda route: route.fulfill(status=200, content_type="text/html", body=body))
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.goto(ORIGIN)
    yield pg
    context.close()
    assert not errors, errors


def question(pg) -> str:
    return pg.locator("#mm-card-question").inner_text()


def states(pg) -> dict:
    return pg.evaluate("() => JSON.parse(localStorage.getItem('mm-practice-schedule') || '{}')")


def progress(pg) -> dict:
    return pg.evaluate("""() => Object.fromEntries([...document.querySelectorAll('#mm-progress-table tbody tr')].map(
        (tr) => [tr.dataset.topic, Object.fromEntries([...tr.querySelectorAll('td[data-col]')].map(
            (td) => [td.dataset.col, Number(td.textContent)]))]))""")


def shift_time(pg, ms: int) -> None:
    """As if ``ms`` had passed: every stored time moves back by ms; then reload."""
    pg.evaluate("""(ms) => { const s = JSON.parse(localStorage.getItem('mm-practice-schedule'));
        for (const v of Object.values(s)) { v.due -= ms; v.last -= ms; }
        localStorage.setItem('mm-practice-schedule', JSON.stringify(s)); }""", ms)
    pg.reload()


def test_intervals_grow_from_again_to_easy(page):
    out = page.evaluate("""() => { const S = window.MMPractice.schedule, now = 0;
        const fresh = ['again', 'hard', 'good', 'easy'].map((g) => S(undefined, g, now).due);
        let seasoned = undefined;
        for (let i = 0; i < 3; i++) seasoned = S(seasoned, 'good', now);
        const later = ['again', 'hard', 'good', 'easy'].map((g) => S(seasoned, g, now).due);
        const lapsed = S(seasoned, 'again', now);
        return {fresh, later, seasoned, lapsed}; }""")
    for dues in (out["fresh"], out["later"]):
        assert dues == sorted(dues) and len(set(dues)) == 4, dues
    assert out["fresh"][0] == 60_000  # again: back in a minute
    assert out["later"][2] > out["seasoned"]["interval"] * 86_400_000  # good keeps growing the interval
    assert out["lapsed"]["reps"] == 0 and out["lapsed"]["ease"] < out["seasoned"]["ease"]


def test_again_comes_back_sooner_than_easy_and_the_schedule_survives_reload(page):
    first = question(page)
    assert first == "Question T6-0"
    page.keyboard.press("Space")
    page.click("#mm-grade-again")
    assert question(page) == "Question T6-1"  # the new cards come before one graded again a moment ago
    page.click("#mm-grade-easy")
    saved = states(page)
    assert saved["T6-0"]["grade"] == "again" and saved["T6-1"]["grade"] == "easy"
    assert saved["T6-0"]["due"] < saved["T6-1"]["due"]
    assert saved["T6-1"]["due"] - saved["T6-0"]["due"] > 3 * 86_400_000

    page.reload()
    assert states(page) == saved  # stored, and nothing rewrote it on load
    shift_time(page, 2 * 60_000)  # two minutes later: the card graded "again" is due, first in line
    assert question(page) == "Question T6-0"
    assert page.locator(".mm-chip-due").is_visible()
    page.check("#mm-filter-due")  # due or new only: the "easy" card is not among them
    shown = set()
    for _ in range(len(CARDS)):
        shown.add(question(page))
        page.click("#mm-next")
    assert "Question T6-1" not in shown and "Question T6-0" in shown
    assert len(shown) == len(CARDS) - 1


def test_progress_view_counts_per_topic(page):
    before = progress(page)
    assert before == {"T6": {"cards": 3, "new": 3, "due": 0, "later": 0, "known": 0},
                      "T7": {"cards": 2, "new": 2, "due": 0, "later": 0, "known": 0}}
    page.select_option("#mm-filter-topic", "T7")
    page.keyboard.press("k")  # marked known
    page.keyboard.press("1")  # again
    page.keyboard.press("4")  # the other T7 card: easy
    after = progress(page)
    assert after["T7"] == {"cards": 2, "new": 0, "due": 0, "later": 2, "known": 1}
    assert after["T6"] == before["T6"]
    shift_time(page, 2 * 60_000)
    assert progress(page)["T7"] == {"cards": 2, "new": 0, "due": 1, "later": 1, "known": 1}
    page.select_option("#mm-filter-kind", "sizing")
    assert question(page).startswith("Question T7")


def test_phone_layout_fits(chromium):
    context = chromium.new_context(viewport={"width": 390, "height": 844})
    body = practice_html()
    context.route(f"{ORIGIN}**", lambda route: route.fulfill(status=200, content_type="text/html", body=body))
    pg = context.new_page()
    pg.goto(ORIGIN)
    for selector in ("#mm-filter-topic", "#mm-grade-easy", "#mm-progress-table"):
        box = pg.locator(selector).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390 + 1, (selector, box)
    context.close()


def test_sizing_problems_become_cards():
    from website import site_pages

    titles = {p.src_uri.split("/")[-1].removesuffix(".md"): (p.topic, p.title) for p in site_pages.topic_pages()}
    cards = sizing.practice_cards(lambda md, page: md, "practice", titles)
    assert len(cards) == len(sizing.load_problems())
    card = next(c for c in cards if c["id"] == "sizing-kv_llama2_70b")
    assert card["kind"] == "sizing" and card["topic"] == "T6"
    assert card["url"] == "../sizing/" and card["anchor"] == "kv_llama2_70b"  # the page's URL, then its problem
    assert "1.342 GB" in card["answer"] and "1.342" not in card["question"]  # the answer stays on the back
    assert "topic:" not in card["question"] and "Llama 2 paper" in card["question"]  # the given figures, cited


def test_exercise_pages_become_link_only_cards(tmp_path):
    from website import site_pages

    docs = tmp_path / "docs"
    (docs / "topics").mkdir(parents=True)
    (docs / "exercises").mkdir()
    (docs / "exercises" / "index.md").write_text("# Exercises\n", encoding="utf-8")
    (docs / "exercises" / "ring_all_reduce.md").write_text(
        "---\ntitle: Ring all-reduce from send/recv\ndifficulty: hard\n---\n\n# Ring all-reduce\n\n"
        "Belongs to [parallelism](../topics/parallelism.md).\n", encoding="utf-8")
    (docs / "exercises" / "plain.md").write_text("# A plain exercise\n", encoding="utf-8")
    cards = site_pages.exercise_cards("practice", docs)
    assert [c["id"] for c in cards] == ["exercise-plain", "exercise-ring_all_reduce"]
    ring = cards[1]
    assert ring["kind"] == "exercise" and ring["difficulty"] == "hard"
    assert ring["question"] == "Coding exercise: Ring all-reduce from send/recv"
    assert ring["url"] == "../exercises/ring_all_reduce/"
    assert cards[0]["question"] == "Coding exercise: A plain exercise"
    assert site_pages.exercise_cards("practice", tmp_path / "nowhere") == []
