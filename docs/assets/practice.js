// Practice mode: question cards generated from the topic pages at build time (an inline JSON
// script on the practice page), plus the sizing problems' cards; a question card shows its own
// 30-second answer and the measured number it rests on. Filters by topic and difficulty, answer
// hidden until asked, keyboard-driven.
//
// Spaced repetition: after revealing, the reader grades the card again / hard / good / easy and it
// comes back on a schedule (a small SM-2 variant, below: `schedule`). The cards are shown most-due
// first: cards whose time has come (oldest first), then new cards, then the rest by when they fall
// due. The schedule and the "known" marks stay in this browser's localStorage; nothing is sent. A stored
// entry of the wrong shape is dropped on load (the valid parts kept): the page starts fresh, never breaks.
(function () {
  "use strict";
  const KEY = "mm-practice-known";
  const SCHEDULE_KEY = "mm-practice-schedule";
  const MINUTE = 60 * 1000;
  const DAY = 24 * 60 * MINUTE;
  const GRADES = ["again", "hard", "good", "easy"];

  // One card's next state after a grade (SM-2-like: an ease factor that grows with "easy" and shrinks
  // with "hard"/"again"; intervals in days). "again" resets the card: back in a minute.
  function schedule(prev, grade, now) {
    const s = prev ? { ...prev } : { ease: 2.5, interval: 0, reps: 0, lapses: 0 };
    if (grade === "again") {
      s.reps = 0;
      s.lapses += 1;
      s.ease = Math.max(1.3, s.ease - 0.2);
      s.interval = 0;
      s.due = now + MINUTE;
    } else {
      if (grade === "hard") {
        s.ease = Math.max(1.3, s.ease - 0.15);
        s.interval = s.reps === 0 ? 0.5 : Math.max(1, s.interval * 1.2);
      } else if (grade === "good") {
        s.interval = s.reps === 0 ? 1 : s.reps === 1 ? 3 : s.interval * s.ease;
      } else if (grade === "easy") {
        s.ease += 0.15;
        s.interval = s.reps === 0 ? 4 : Math.max(s.interval * s.ease * 1.3, 4);
      } else {
        throw new Error(`unknown grade ${grade}`);
      }
      s.reps += 1;
      s.due = now + s.interval * DAY;
    }
    s.last = now;
    s.grade = grade;
    return s;
  }

  function wait(ms) {
    if (ms < 1.5 * MINUTE) return "1 min";
    if (ms < DAY) return `${Math.round(ms / (60 * MINUTE))} h`;
    const days = ms / DAY;
    return days < 60 ? `${Math.round(days)} d` : `${Math.round(days / 30)} mo`;
  }

  function load(key, fallback) {
    try {
      return JSON.parse(localStorage.getItem(key) || "null") || fallback;
    } catch (e) {
      return fallback; // a corrupted entry (or no storage): start over rather than break the page
    }
  }

  function save(key, value) {
    try {
      localStorage.setItem(key, JSON.stringify(value));
    } catch (e) {
      // storage full or disabled: the marks last until the page is left
    }
  }

  // What is stored may be from an older version, edited by hand or corrupted, even when it is valid JSON
  // ({"a":1}, 5, [], a string): keep the parts that have the right shape and drop the rest.
  function loadKnown() {
    const ids = load(KEY, []);
    return new Set(Array.isArray(ids) ? ids.filter((id) => typeof id === "string") : []);
  }

  const isCount = (x) => typeof x === "number" && Number.isFinite(x) && x >= 0;

  function isState(s) {
    return s !== null && typeof s === "object" && !Array.isArray(s) && isCount(s.ease) && s.ease > 0 &&
      isCount(s.interval) && isCount(s.reps) && isCount(s.lapses) && isCount(s.due);
  }

  function loadStates() {
    const stored = load(SCHEDULE_KEY, {});
    const states = Object.create(null); // a card id such as "__proto__" stays a plain key
    if (stored !== null && typeof stored === "object" && !Array.isArray(stored)) {
      for (const [id, s] of Object.entries(stored)) if (isState(s)) states[id] = s;
    }
    return states;
  }

  function start() {
    const root = document.getElementById("mm-practice");
    const data = document.getElementById("mm-cards");
    if (!root || !data || root.dataset.ready) return;
    root.dataset.ready = "1";
    const all = JSON.parse(data.textContent);
    const $ = (id) => document.getElementById(id);
    const known = loadKnown();
    const states = loadStates();
    let order = all.map((_, i) => i);
    let visible = [];
    let pos = 0;
    let graded = 0; // cards graded since the deck was last filtered or shuffled: the counter advances with them
    const now = () => Date.now();

    const topics = [...new Map(all.map((c) => [c.topic, c.topic_title])).entries()];
    for (const [topic, title] of topics) {
      const opt = document.createElement("option");
      opt.value = topic;
      opt.textContent = topic ? `${topic}. ${title}` : title;
      $("mm-filter-topic").appendChild(opt);
    }
    const kinds = [...new Set(all.map((c) => c.kind))];
    for (const kind of kinds) {
      const opt = document.createElement("option");
      opt.value = kind;
      opt.textContent = kind;
      $("mm-filter-kind") && $("mm-filter-kind").appendChild(opt);
    }

    // 0: due (oldest first), 1: new, 2: scheduled later (soonest first)
    function rank(c, t) {
      const s = states[c.id];
      if (!s) return [1, 0];
      return s.due <= t ? [0, s.due] : [2, s.due];
    }

    function filter() {
      const topic = $("mm-filter-topic").value;
      const level = $("mm-filter-difficulty").value;
      const kind = $("mm-filter-kind") ? $("mm-filter-kind").value : "";
      const onlyUnknown = $("mm-filter-unknown").checked;
      const onlyDue = $("mm-filter-due") && $("mm-filter-due").checked;
      const t = now();
      visible = order.filter((i) => {
        const c = all[i];
        return (!topic || c.topic === topic) && (!level || c.difficulty === level) && (!kind || c.kind === kind) &&
          (!onlyUnknown || !known.has(c.id)) && (!onlyDue || rank(c, t)[0] < 2);
      });
      const position = new Map(order.map((i, k) => [i, k]));
      visible.sort((a, b) => {
        const ra = rank(all[a], t), rb = rank(all[b], t);
        return ra[0] - rb[0] || ra[1] - rb[1] || position.get(a) - position.get(b);
      });
      pos = Math.min(pos, Math.max(visible.length - 1, 0));
      show();
      progress();
    }

    function chip(text, cls) {
      const span = document.createElement("span");
      span.className = "mm-chip" + (cls ? " " + cls : "");
      span.textContent = text;
      $("mm-card-meta").appendChild(span);
    }

    function show() {
      const answer = $("mm-card-answer");
      answer.hidden = true;
      $("mm-reveal").textContent = "Reveal answer";
      const t = now();
      const due = all.filter((c) => states[c.id] && states[c.id].due <= t).length;
      const everGraded = all.filter((c) => states[c.id]).length;
      if (!visible.length) {
        $("mm-card-meta").textContent = "";
        $("mm-card-question").textContent = "No card matches these filters.";
        answer.innerHTML = "";
        $("mm-progress").textContent = `${known.size} of ${all.length} cards marked known · ${everGraded} graded, ${due} due now`;
        return;
      }
      const c = all[visible[pos]];
      $("mm-card-meta").innerHTML = "";
      for (const text of [c.topic ? `${c.topic}. ${c.topic_title}` : c.topic_title, c.difficulty, c.kind]) chip(text);
      if (known.has(c.id)) chip("known", "mm-chip-known");
      const s = states[c.id];
      if (!s) chip("new", "mm-chip-new");
      else if (s.due <= t) chip("due", "mm-chip-due");
      else chip(`next in ${wait(s.due - t)}`, "mm-chip-later");
      $("mm-card-question").innerHTML = c.question; // escaped at build time
      const measured = c.measured ? `<div class="mm-card-measured"><strong>Measured:</strong> ${c.measured}</div>` : "";
      const link = c.kind === "sizing" ? "Worked problem on the sizing page →" : c.kind === "exercise" ? "Open the exercise →" : "Full answer and measurements →";
      const href = c.url + (c.anchor ? `#${c.anchor}` : "");
      answer.innerHTML = measured + c.answer + `<p><a href="${href}">${link}</a></p>`; // built from the site's own pages
      $("mm-known").textContent = known.has(c.id) ? "Mark not known" : "Mark known";
      for (const g of GRADES) {
        const button = $(`mm-grade-${g}`);
        if (button) button.querySelector(".mm-grade-wait").textContent = wait(schedule(s, g, t).due - t);
      }
      $("mm-card").dataset.card = c.id;
      // a graded card moves to the back of the deck and the next comes to the front: count the graded ones too
      const number = Math.min(graded + pos + 1, visible.length);
      $("mm-progress").textContent = `Card ${number} of ${visible.length} · ${known.size} of ${all.length} marked known · ` +
        `${everGraded} graded, ${due} due now`;
    }

    function progress() {
      const table = $("mm-progress-table");
      if (!table) return;
      const t = now();
      const rows = new Map();
      for (const c of all) {
        const key = c.topic || c.topic_title;
        if (!rows.has(key)) rows.set(key, { title: c.topic ? `${c.topic}. ${c.topic_title}` : c.topic_title, cards: 0, fresh: 0, due: 0, later: 0, known: 0 });
        const r = rows.get(key);
        const s = states[c.id];
        r.cards += 1;
        if (!s) r.fresh += 1;
        else if (s.due <= t) r.due += 1;
        else r.later += 1;
        if (known.has(c.id)) r.known += 1;
      }
      const body = table.querySelector("tbody");
      body.innerHTML = "";
      for (const [key, r] of rows) {
        const tr = document.createElement("tr");
        tr.dataset.topic = key;
        const cells = [r.title, r.cards, r.fresh, r.due, r.later, r.known];
        cells.forEach((v, k) => {
          const td = document.createElement("td");
          td.textContent = String(v);
          if (k) td.dataset.col = ["", "cards", "new", "due", "later", "known"][k];
          tr.appendChild(td);
        });
        body.appendChild(tr);
      }
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
      save(KEY, [...known]);
      show();
      progress();
    }
    function grade(g) {
      if (!visible.length) return;
      const id = all[visible[pos]].id;
      states[id] = schedule(states[id], g, now());
      save(SCHEDULE_KEY, states);
      graded += 1;
      pos = 0; // the most-due card next
      filter();
    }
    function shuffle() {
      for (let i = order.length - 1; i > 0; i--) {
        const j = Math.floor(Math.random() * (i + 1));
        [order[i], order[j]] = [order[j], order[i]];
      }
      pos = 0;
      graded = 0;
      filter();
    }

    $("mm-reveal").addEventListener("click", reveal);
    $("mm-next").addEventListener("click", () => step(1));
    $("mm-prev").addEventListener("click", () => step(-1));
    $("mm-known").addEventListener("click", toggleKnown);
    $("mm-shuffle").addEventListener("click", shuffle);
    for (const g of GRADES) {
      const button = $(`mm-grade-${g}`);
      if (button) button.addEventListener("click", () => grade(g));
    }
    for (const id of ["mm-filter-topic", "mm-filter-difficulty", "mm-filter-kind", "mm-filter-unknown", "mm-filter-due"]) {
      if ($(id)) $(id).addEventListener("change", () => { pos = 0; graded = 0; filter(); });
    }
    // Capture phase on window: the theme binds N and P to next/previous page; here they mean cards.
    const keys = { " ": reveal, n: () => step(1), arrowright: () => step(1), p: () => step(-1),
                   arrowleft: () => step(-1), k: toggleKnown, s: shuffle,
                   1: () => grade("again"), 2: () => grade("hard"), 3: () => grade("good"), 4: () => grade("easy") };
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

  window.MMPractice = { schedule, MINUTE, DAY };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
