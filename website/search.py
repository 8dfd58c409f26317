"""What a reader's browser searches: measured blocks stay out of the search index (it then holds what the
pages say, and stays small), and the theme's index is slimmed. The MkDocs hook calls both."""

from __future__ import annotations

import re

# -- what a candidate's browser loads and finds (issue 16) --------------------------------------------
# A measured block (the device tabs of a {{ results }} marker, an artifact from a record) is data, not
# prose: it stays out of the search index, which then holds what the pages say, and stays small.
_MEASURED_START = re.compile(r'<div class="tabbed-set\b|<details class="example"(?=[^>]*>\s*<summary>[^<]*from the record)')
_OPEN_CLOSE = {"div": re.compile(r"<div\b|</div>"), "details": re.compile(r"<details\b|</details>")}


def _element_end(html_text: str, start: int, tag: str) -> int:
    """Where the element opened at ``start`` closes (just after its end tag), counting nested ones."""
    depth = 0
    for m in _OPEN_CLOSE[tag].finditer(html_text, start):
        depth += 1 if m.group(0)[1] != "/" else -1
        if depth == 0:
            return m.end()
    return len(html_text)


def exclude_measured_from_search(html_text: str) -> str:
    """Wrap every results tab set that carries a record (its badge) and every record artifact in a
    <section data-search-exclude> (read by the theme's search plugin, which then removes the attribute).
    A wrapper, not the attribute on the div itself: the plugin compares elements by tag, so an excluded
    div would stop being excluded at the first nested </div>."""
    out, pos = [], 0
    for m in _MEASURED_START.finditer(html_text):
        if m.start() < pos:
            continue  # inside a block already wrapped
        tag = "div" if m.group(0).startswith("<div") else "details"
        end = _element_end(html_text, m.start(), tag)
        if tag == "div" and "mm-badge" not in html_text[m.start():end]:
            continue
        out.append(html_text[pos:m.start()])
        out.append(f'<section class="mm-measured" data-search-exclude="measured">{html_text[m.start():end]}</section>')
        pos = end
    html_text = "".join(out) + html_text[pos:]
    # the Measured section's text explains the records on the page: its headings stay searchable (they
    # name each demo), the text between them does not (the answers above it say what it found). An
    # <aside>, not a <section>: a wrapped tab set inside is a <section>, and the plugin compares by tag.
    # the section by its title, not its id: a "Measured" heading higher on the page (in a fold) takes the id
    measured = re.search(r'<h2 id="[^"]*">Measured<a .*?</h2>', html_text, re.S)
    if measured:
        end = html_text.find("<h2 ", measured.end())
        end = len(html_text) if end < 0 else end
        chunks = re.split(r"(<h3\b.*?</h3>)", html_text[measured.end():end], flags=re.S)
        region = "".join(c if c.startswith("<h3") or not c.strip()
                         else f'<aside class="mm-search-skip" data-search-exclude="measured">{c}</aside>' for c in chunks)
        html_text = html_text[:measured.end()] + region + html_text[end:]
    # a page's further reading is titles of papers and docs: found on the page, not by the site's search
    reading = re.search(r'<h2 id="further-reading">.*?</h2>', html_text)
    if reading:
        html_text = (html_text[:reading.end()] + '<aside class="mm-search-skip" data-search-exclude="reading">'
                     + html_text[reading.end():] + "</aside>")
    # a follow-up's question is what a reader searches for; its answer, and a sizing problem's worked steps (its
    # question and figures stay), are read on the page: the index stays within what a reader's first search loads
    html_text = _FOLD_BODY.sub(lambda m: m.group(1) + '<aside class="mm-search-skip" data-search-exclude="fold">'
                               + m.group(2) + "</aside></details>", html_text)
    # claim check marks and the "not yet measured" notes are data about the
    # page's numbers, not prose to search
    html_text = html_text.replace('<span class="mm-check"', '<span data-search-exclude="claim" class="mm-check"')
    html_text = html_text.replace('<p class="mm-pending-note">', '<p data-search-exclude="note" class="mm-pending-note">')
    return html_text


# the body of a closed follow-up (class "question") or of a sizing problem's answer (class "success"), up to its end
# tag: neither holds a nested fold
_FOLD_BODY = re.compile(r'(<details class="(?:question|success)">\s*<summary>.*?</summary>)(.*?)</details>', re.S)
QUESTION_SEARCH_BOOST = 3
# the glossary is one document holding every term, so a term's ranking against short pages is pulled down by the
# glossary's length; this boost keeps it among the first results for a term it defines ("all-reduce")
GLOSSARY_SEARCH_BOOST = 2
_BLOCK_TAGS = re.compile(r"\s*</?(?:p|ul|ol|li)>\s*")
_INLINE_TAGS = re.compile(r"</?(?:code|sub|sup)>")


# A long section of a topic page (a full answer's part) is indexed as its opening sentences, which the result list
# shows, then each further word once, without the commonest English words. Search matches single terms (the
# theme's lunr index scores words, not phrases), so every term the section holds is still found; only repeats
# and filler go. It keeps the index within its budget as the answers grow (issue 33: 229 -> about 185 KB; issue 34's
# topic page took it back to 201 KB, and the shorter opening and threshold below to about 195 KB).
LONG_SECTION = 800  # characters: a 30-second answer (at most 90 words, about 650 characters) stays whole
SECTION_OPENING = 400  # characters of a long section kept as written, cut at a sentence end
_FILLER = frozenset(
    "a an the and or of to in on for by with as at from is are was were be been being it its this that these those "
    "which who whom what when where how why than then so such not no nor but if into onto over under per each every "
    "all any both either neither one can may might will would should could do does did done has have had having "
    "more most less least very also only just about after before between while there their them they we you our "
    "your he she his her him i me my".split())


def compact_section(text: str) -> str:
    """A long section's text as its opening sentences, then every further word once (see LONG_SECTION)."""
    if len(text) <= LONG_SECTION:
        return text
    head = text[:SECTION_OPENING]
    cut = head.rfind(". ")
    head = head[:cut + 1] if cut > SECTION_OPENING // 2 else head.rsplit(" ", 1)[0]
    seen = {w.strip(".,;:()[]'\"").lower() for w in head.split()}
    rest = []
    for word in text[len(head):].split():
        bare = word.strip(".,;:()[]'\"")
        key = bare.lower()
        if len(key) > 1 and key not in seen and key not in _FILLER:
            seen.add(key)
            rest.append(bare)
    return head + (" … " + " ".join(rest) if rest else "")


def slim_search_index(index_json: str) -> str:
    """The theme's search index, smaller and the same to search: a page's tags stay on the page's own
    entry (not copied onto each of its sections); paragraph and list tags become spaces and inline
    code tags go (the result list shows the words, not their formatting)."""
    import json

    index = json.loads(index_json)
    # how the site is built is the contributors' page, found from the contributing guide, not by a reader's search
    index["docs"] = [doc for doc in index["docs"] if not doc["location"].startswith("architecture/")]
    for doc in index["docs"]:
        if "#" in doc["location"]:
            doc.pop("tags", None)
        if doc["location"] == "glossary/":
            doc["boost"] = GLOSSARY_SEARCH_BOOST
        if re.match(r"topics/[^#]*#questions$", doc["location"]):
            # a topic's list of questions: the words a candidate searches for. Each question is also its own entry
            # (its heading, the title field's weight, and its 30-second answer), not boosted further: boosted, a
            # page's one question that names a term outranks the page whose subject it is ("all-reduce")
            doc["boost"] = QUESTION_SEARCH_BOOST * doc.get("boost", 1)
        doc["text"] = _INLINE_TAGS.sub("", _BLOCK_TAGS.sub(" ", doc["text"])).strip()
        if doc["location"].startswith("topics/") and "#" in doc["location"]:
            doc["text"] = compact_section(doc["text"])
    return json.dumps(index, ensure_ascii=False, separators=(",", ":"))
