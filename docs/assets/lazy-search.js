// The search index is fetched when search is used, not on every page load.
//
// The theme's bundle asks for search/search_index.json (an XMLHttpRequest) as soon as a page opens, so
// every page's first load would carry the whole index (374 KB raw, 127 KB compressed with twelve topic
// pages). This script runs before the bundle and holds that one request back until the reader shows an
// interest in search: the pointer over the search box (the index then arrives while the reader moves to
// type), the search field focused (a click, a tap, or the theme's "/", "s" and "f" shortcuts), or a
// link that asks for search-term highlighting (?h=). Every other request goes out untouched.
(function () {
  "use strict";
  var INDEX = /(^|\/)search\/search_index\.json(\?|$)/;
  var open = XMLHttpRequest.prototype.open;
  var send = XMLHttpRequest.prototype.send;
  var wanted = false;
  var held = [];  // [request, arguments] pairs waiting for a reader to use search

  function release() {
    if (wanted) return;
    wanted = true;
    held.splice(0).forEach(function (pair) { send.apply(pair[0], pair[1]); });
  }

  XMLHttpRequest.prototype.open = function (method, url) {
    this.mmSearchIndex = INDEX.test(String(url));
    return open.apply(this, arguments);
  };
  XMLHttpRequest.prototype.send = function () {
    if (this.mmSearchIndex && !wanted) {
      held.push([this, arguments]);
      return undefined;
    }
    return send.apply(this, arguments);
  };

  function inSearch(target) {
    return target instanceof Element &&
      (target.id === "__search" || !!target.closest("[data-md-component=search], label[for=__search]"));
  }
  document.addEventListener("pointerover", function (e) { if (inSearch(e.target)) release(); }, true);
  document.addEventListener("focusin", function (e) { if (inSearch(e.target)) release(); }, true);
  document.addEventListener("change", function (e) { if (inSearch(e.target)) release(); }, true);
  if (/[?&](h|q)=/.test(location.search)) release();
})();
