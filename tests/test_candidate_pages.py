"""Candidate-first pages (issue 32), in a real browser at 1280x800 and 390x844: every topic page reads in one
sitting with its folds closed, and nothing in the reader's path is machinery or a mislabelled number.

Per topic page, at both sizes: no bare dash where a value belongs; only measured values carry a device (a
computed, datasheet or static-analysis value says so); no unit printed twice ("64 GPUs GPUs"); no claim shown as
an expression; every question with a 30-second answer of at most 90 words as rendered and its full answer
folded under it. At 1280x800 the page, folds closed, is under
PAGE_HEIGHT_MAX px.
"""

from __future__ import annotations

import re

import pytest

from website.site_pages import spoken_words
from scripts.check import CARD_POINTER
from test_browser import DESKTOP, PHONE, _context_page, server, topic_paths  # noqa: F401 (server: a fixture)

pytestmark = pytest.mark.slow

PAGE_HEIGHT_MAX = 12_000  # px at 1280x800, every fold closed: a topic page read in one sitting
WORDS_MAX = 90  # a 30-second answer, as rendered

READ_PAGE = r"""() => {
  const main = document.querySelector('.md-content article') || document.body;
  // a value cell or item that is only a dash ("–", "—", "-"), or a label followed by one ("control: –"); folded
  // content included (textContent: a closed fold's text is still the page's)
  const dashes = [...main.querySelectorAll('td, li, p')]
    .map((e) => e.textContent.trim()).filter((t) => /^[–—-]$|:\s*[–—]\s*(;\s*[–—]\s*)*\.?$/.test(t));
  const mislabelled = [...main.querySelectorAll('.mm-value[data-origin]')]
    .map((e) => e.textContent.trim()).filter((t) => !/\((computed|datasheet|static analysis)\)$/.test(t));
  // a value's unit repeated by the words after it: "64 GPUs (computed) GPUs"
  const doubled = [...main.querySelectorAll('.mm-value')].map((e) => {
    const unit = (e.textContent.match(/^\S+\s+([A-Za-z][\w/-]*)\s*\(/) || [])[1];
    const next = e.nextSibling && e.nextSibling.nodeType === 3 ? e.nextSibling.textContent : '';
    const word = (next.match(/^\s*([A-Za-z][\w/-]*)/) || [])[1];
    return unit && word && unit === word ? e.textContent + next.slice(0, 20) : null;
  }).filter(Boolean);
  const expressions = (main.textContent.match(/(✓ holds|✗ contradicted) on [^\n]{0,40}/g) || [])
    .concat([...main.querySelectorAll('.mm-claim-expr')].map((e) => e.innerText));
  // the 30-second answers: under '## Answers', each question's heading (h3), then the paragraphs before its
  // full answer's fold; the question itself is not counted, and every question has a closed fold
  const answers = [];
  const folds = [];
  const start = main.querySelector('h2[id="answers"]');
  for (let e = start && start.nextElementSibling; e && e.tagName !== 'H2'; e = e.nextElementSibling) {
    if (e.tagName === 'H3') { answers.push(''); folds.push(null); }
    else if (e.tagName === 'P' && answers.length && folds[folds.length - 1] === null) answers[answers.length - 1] += ' ' + e.innerText;
    else if (e.tagName === 'DETAILS' && folds.length) folds[folds.length - 1] = e.open ? 'open' : e.querySelector('summary').innerText;
  }
  const plots = [...main.querySelectorAll('img[src*="assets/plots/"]')].map((i) => i.currentSrc);
  return {height: document.documentElement.scrollHeight, dashes, mislabelled, doubled, expressions, answers, folds, plots};
}"""


LOAD_IMAGES = """async () => {
  const images = [...document.querySelectorAll('.md-content img')];
  images.forEach((i) => { i.loading = 'eager'; });
  await Promise.all(images.map((i) => i.complete ? null : new Promise((done) => { i.onload = done; i.onerror = done; })));
}"""


def words(text: str) -> int:
    """Rendered text has no markers left: the check's own word count applies as it is."""
    return spoken_words(text)


def read(chromium, server, path, viewport):  # noqa: F811 (server: the fixture)
    context, pg, errors = _context_page(chromium, server, viewport)
    try:
        pg.goto(server + path, wait_until="load")
        pg.evaluate(LOAD_IMAGES)  # a lazy image is 0 px until it loads; the reader who scrolls sees it whole
        return pg.evaluate(READ_PAGE), errors
    finally:
        context.close()


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
@pytest.mark.parametrize("path", topic_paths())
def test_a_topic_page_puts_the_answer_first_and_no_machinery_in_the_way(chromium, server, path, viewport):  # noqa: F811
    page, errors = read(chromium, server, path, viewport)
    assert not errors, errors
    assert not page["dashes"], f"{path}: bare dashes where values belong: {page['dashes'][:5]}"
    assert not page["mislabelled"], f"{path}: a value not measured carries a device: {page['mislabelled'][:5]}"
    assert not page["doubled"], f"{path}: a unit printed twice: {page['doubled'][:5]}"
    assert not page["expressions"], f"{path}: a claim shown as an expression: {page['expressions'][:3]}"
    assert page["answers"], f"{path}: no 30-second answer found"
    assert all(f == "Full answer" for f in page["folds"]), f"{path}: a question without its closed full answer: {page['folds']}"
    long = [(words(a), a[:60]) for a in page["answers"] if words(a) > WORDS_MAX]
    assert not long, f"{path}: 30-second answers over {WORDS_MAX} words as rendered: {long}"
    # a phone loads each plot's phone copy (narrow, legend below the axes: legible at 390 px), a desktop the wide one
    phone = [src.endswith(".phone.svg") for src in page["plots"]]
    assert all(phone) if viewport == PHONE else not any(phone), f"{path}: wrong plot copies"
    if viewport == DESKTOP:
        assert page["height"] < PAGE_HEIGHT_MAX, f"{path} is {page['height']:,} px tall with its folds closed"


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
def test_home_starts_with_one_evening_and_every_topic_within_two_screens(chromium, server, viewport):  # noqa: F811
    """Issue 32 item 10: a 'start here' path for one evening, then a link to every topic page, all of them within
    the first two screens."""
    context, pg, errors = _context_page(chromium, server, viewport)
    try:
        pg.goto(server, wait_until="load")
        plan = pg.locator("h2#start-here-one-evening + p + ol a")
        assert plan.count() >= 5, "the one-evening plan links its topics"
        links = pg.evaluate("""() => [...document.querySelectorAll('.mm-topic-links a')]
            .map((a) => [a.getAttribute('href'), a.getBoundingClientRect().bottom + window.scrollY])""")
    finally:
        context.close()
    assert not errors, errors
    assert sorted(href.split("/")[1] for href, _ in links) == sorted(p.removeprefix("topics/").strip("/")
                                                                      for p in topic_paths())
    below = [href for href, bottom in links if bottom > 2 * viewport["height"]]
    assert not below, f"topic links below the first two screens at {viewport}: {below}"


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
def test_practice_starts_with_the_evening_plan_and_its_buttons_on_the_first_screen(chromium, server, viewport):  # noqa: F811
    """Issue 32 item 7: the default deck follows the one-evening plan; Reveal and the grade buttons are on the first
    screen; no button carries a tooltip that could cover another; the card counter advances as cards are graded."""
    context, pg, errors = _context_page(chromium, server, viewport)
    try:
        pg.goto(server + "practice/", wait_until="load")
        pg.evaluate("() => localStorage.clear()")
        pg.reload(wait_until="load")
        assert pg.locator("#mm-card-meta .mm-chip").first.inner_text().startswith("T3."), "the evening plan first"
        for button in ("#mm-reveal", "#mm-next", "#mm-grade-again", "#mm-grade-easy"):
            box = pg.locator(button).bounding_box()
            assert box and box["y"] + box["height"] <= viewport["height"], f"{button} below the first screen: {box}"
        assert pg.locator(".mm-practice button[title]").count() == 0, "a button's title becomes a tooltip over another"
        assert pg.locator("#mm-progress").inner_text().startswith("Card 1 of ")
        pg.locator("#mm-grade-good").click()
        assert pg.locator("#mm-progress").inner_text().startswith("Card 2 of ")
        cards = pg.evaluate("() => JSON.parse(document.getElementById('mm-cards').textContent)")
    finally:
        context.close()
    assert not errors, errors
    exercises = [c for c in cards if c["kind"] == "exercise"]
    assert exercises and not [c["question"] for c in exercises if "Exercise:" in c["question"]]
    assert not [c["question"] for c in exercises if "Key idea" not in c["answer"]], "an exercise card without its sketch"
    # a card is read alone: no answer may point "above" or to "this page"
    pointing = [c["question"][:60] for c in cards if CARD_POINTER.search(re.sub(r"<[^>]+>", "", c["answer"]))]
    assert not pointing, f"answers that point elsewhere on a page: {pointing}"
