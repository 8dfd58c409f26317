// Practice mode: question cards generated from the topic pages at build time (an inline JSON
// script on the practice page); a question card shows its own 30-second answer and the measured
// number it rests on. Filters by topic and difficulty, answer hidden until asked,
// keyboard-driven, and the "known" marks are kept in this browser's localStorage.
(function () {
  "use strict";
  const KEY = "mm-practice-known";

  function start() {
    const root = document.getElementById("mm-practice");
    const data = document.getElementById("mm-cards");
    if (!root || !data || root.dataset.ready) return;
    root.dataset.ready = "1";
    const all = JSON.parse(data.textContent);
    const $ = (id) => document.getElementById(id);
    const known = new Set(JSON.parse(localStorage.getItem(KEY) || "[]"));
    let order = all.map((_, i) => i);
    let visible = [];
    let pos = 0;

    const topics = [...new Map(all.map((c) => [c.topic, c.topic_title])).entries()];
    for (const [topic, title] of topics) {
      const opt = document.createElement("option");
      opt.value = topic;
      opt.textContent = `${topic}. ${title}`;
      $("mm-filter-topic").appendChild(opt);
    }

    function filter() {
      const topic = $("mm-filter-topic").value;
      const level = $("mm-filter-difficulty").value;
      const onlyUnknown = $("mm-filter-unknown").checked;
      visible = order.filter((i) => {
        const c = all[i];
        return (!topic || c.topic === topic) && (!level || c.difficulty === level) && (!onlyUnknown || !known.has(c.id));
      });
      pos = Math.min(pos, Math.max(visible.length - 1, 0));
      show();
    }

    function show() {
      const answer = $("mm-card-answer");
      answer.hidden = true;
      $("mm-reveal").textContent = "Reveal answer";
      if (!visible.length) {
        $("mm-card-meta").textContent = "";
        $("mm-card-question").textContent = "No card matches these filters.";
        answer.innerHTML = "";
        $("mm-progress").textContent = `${known.size} of ${all.length} cards marked known`;
        return;
      }
      const c = all[visible[pos]];
      $("mm-card-meta").innerHTML = "";
      for (const text of [`${c.topic}. ${c.topic_title}`, c.difficulty, c.kind]) {
        const span = document.createElement("span");
        span.className = "mm-chip";
        span.textContent = text;
        $("mm-card-meta").appendChild(span);
      }
      if (known.has(c.id)) {
        const span = document.createElement("span");
        span.className = "mm-chip mm-chip-known";
        span.textContent = "known";
        $("mm-card-meta").appendChild(span);
      }
      $("mm-card-question").innerHTML = c.question; // escaped at build time
      const measured = c.measured ? `<div class="mm-card-measured"><strong>Measured:</strong> ${c.measured}</div>` : "";
      answer.innerHTML = measured + c.answer + `<p><a href="${c.url}">Full answer and measurements →</a></p>`; // built from the site's own pages
      $("mm-known").textContent = known.has(c.id) ? "Mark not known" : "Mark known";
      $("mm-progress").textContent = `Card ${pos + 1} of ${visible.length} · ${known.size} of ${all.length} marked known`;
    }

    function reveal() {
      const answer = $("mm-card-answer");
      answer.hidden = !answer.hidden;
      $("mm-reveal").textContent = answer.hidden ? "Reveal answer" : "Hide answer";
    }
    function step(d) {
      if (visible.length) { pos = (pos + d + visible.length) % visible.length; show(); }
    }
    function toggleKnown() {
      if (!visible.length) return;
      const id = all[visible[pos]].id;
      known.has(id) ? known.delete(id) : known.add(id);
      localStorage.setItem(KEY, JSON.stringify([...known]));
      show();
    }
    function shuffle() {
      for (let i = order.length - 1; i > 0; i--) {
        const j = Math.floor(Math.random() * (i + 1));
        [order[i], order[j]] = [order[j], order[i]];
      }
      pos = 0;
      filter();
    }

    $("mm-reveal").addEventListener("click", reveal);
    $("mm-next").addEventListener("click", () => step(1));
    $("mm-prev").addEventListener("click", () => step(-1));
    $("mm-known").addEventListener("click", toggleKnown);
    $("mm-shuffle").addEventListener("click", shuffle);
    for (const id of ["mm-filter-topic", "mm-filter-difficulty", "mm-filter-unknown"]) {
      $(id).addEventListener("change", () => { pos = 0; filter(); });
    }
    // Capture phase on window: the theme binds N and P to next/previous page; here they mean cards.
    const keys = { " ": reveal, n: () => step(1), arrowright: () => step(1), p: () => step(-1),
                   arrowleft: () => step(-1), k: toggleKnown, s: shuffle };
    window.addEventListener("keydown", (e) => {
      if (e.target.closest && e.target.closest("input, select, textarea, .md-search")) return;
      if (e.ctrlKey || e.metaKey || e.altKey) return;
      const action = keys[e.key.toLowerCase()];
      if (!action) return;
      e.preventDefault();
      e.stopPropagation();
      action();
    }, true);
    filter();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
