/* Per-query drill-down: renders one page of queries at a time from the two data files the page loads
   before this script (window.BEYONDSIM.content: query texts and document snippets of the benchmark
   version; window.BEYONDSIM.result: this result's rankings, marks and per-query values), so the
   site stays small and works from file:// with no server. Every text goes in through textContent:
   nothing from the data is ever parsed as HTML. Ids come as [id, …] lists and are looked up in Maps,
   never as keys of a plain object, where "__proto__" or "constructor" would find the object's own
   machinery. */
(function () {
  "use strict";
  var data = window.BEYONDSIM || {};
  var main = document.getElementById("queries");
  var pager = document.getElementById("pager");
  if (!main || !data.result) { return; }
  var result = data.result, content = data.content || {};
  var qtexts = new Map(content.queries || []);
  var docs = new Map((content.docs || []).map(function (d) { return [d[0], [d[1], d[2]]]; }));
  var per = result.per_page || 25;
  var queries = result.queries || [];
  var pages = Math.max(1, Math.ceil(queries.length / per));
  var byAnchor = new Map();
  queries.forEach(function (q, i) { byAnchor.set(q.a, i); });

  function el(tag, cls, text) {
    var n = document.createElement(tag);
    if (cls) { n.className = cls; }
    if (text !== undefined && text !== null) { n.textContent = String(text); }
    return n;
  }

  function docRow(q, entry, rank) {
    var docid = result.docids[entry[0]], mark = result.marks[entry[2]];
    var tr = el("tr", "doc mark-row-" + mark);
    tr.setAttribute("data-doc", docid);
    tr.setAttribute("data-mark", mark);
    tr.appendChild(el("td", "num", rank));
    tr.appendChild(el("td", "mono", docid));
    // one line per document: the text cut with an ellipsis, whole in its title and on hover
    var td = el("td", "doc-text"), box = el("span", "clip"), d = docs.get(docid);
    if (d) {
      if (d[0]) { box.appendChild(el("strong", null, d[0])); box.appendChild(document.createTextNode(" ")); }
      box.appendChild(el("span", "snippet", d[1]));
      box.title = (d[0] ? d[0] + " " : "") + d[1];
    } else {
      box.appendChild(el("span", "empty", "text not stored"));
    }
    td.appendChild(box);
    tr.appendChild(td);
    tr.appendChild(el("td", "num", entry[1] === null ? "\u2013" : entry[1]));
    var tdm = el("td");
    tdm.appendChild(el("span", "mark mark-" + mark, result.mark_text[mark]));
    tr.appendChild(tdm);
    return tr;
  }

  function article(q) {
    var a = el("article", "query");
    a.id = q.a;
    a.setAttribute("data-qid", q.q);
    var h = el("h3", null, "Query ");
    h.appendChild(el("code", null, q.q));
    a.appendChild(h);
    var text = qtexts.get(q.q);
    if (text) { a.appendChild(el("p", "qtext", text)); }
    var meta = el("p", "meta");
    (q.m || []).forEach(function (v, i) {
      if (v === null) { return; }
      var s = el("span", "qmeasure", result.measures[i] + " " + v);
      s.setAttribute("data-measure", result.measures[i]);
      meta.appendChild(s);
    });
    if (result.has_qrels) {
      meta.appendChild(el("span", null, q.j + " judged"));
      meta.appendChild(el("span", null, q.v + " violating"));
    }
    a.appendChild(meta);
    if (q.t && q.t.length) {
      var table = el("table", "top"), thead = el("thead"), hr = el("tr");
      [["rank", "num"], ["document", ""], ["title / snippet", ""], ["score", "num"], ["mark", ""]].forEach(function (c) {
        var th = el("th", c[1] || null, c[0]);
        th.setAttribute("scope", "col");
        hr.appendChild(th);
      });
      thead.appendChild(hr);
      table.appendChild(thead);
      var tbody = el("tbody");
      q.t.forEach(function (entry, i) { tbody.appendChild(docRow(q, entry, i + 1)); });
      table.appendChild(tbody);
      var wrap = el("div", "table-wrap");  // a wide table scrolls in its own box, never the page
      wrap.appendChild(table);
      a.appendChild(wrap);
    } else {
      a.appendChild(el("p", "empty", q.r ? "Nothing retrieved." : "Not in the run (scored as an empty ranking)."));
    }
    return a;
  }

  function pageLink(p, current) {
    if (p === current) {
      var s = el("span", "current", "page " + (p + 1));
      s.setAttribute("aria-current", "page");
      return s;
    }
    var link = el("a", null, String(p + 1));
    link.href = "#page-" + (p + 1);
    link.setAttribute("data-page", String(p + 1));
    return link;
  }

  function show(p, anchor) {
    p = Math.min(Math.max(0, p), pages - 1);
    while (main.firstChild) { main.removeChild(main.firstChild); }
    if (!queries.length) { main.appendChild(el("p", "empty", "No per-query data stored for this result.")); }
    queries.slice(p * per, (p + 1) * per).forEach(function (q) { main.appendChild(article(q)); });
    if (pager) {
      while (pager.firstChild) { pager.removeChild(pager.firstChild); }
      if (pages > 1) {
        pager.appendChild(el("span", "note", "queries " + (p * per + 1) + "\u2013" +
          Math.min(queries.length, (p + 1) * per) + " of " + queries.length + ": "));
        for (var i = 0; i < pages; i++) { pager.appendChild(pageLink(i, p)); pager.appendChild(document.createTextNode(" ")); }
      }
    }
    main.setAttribute("data-page", String(p + 1));
    if (anchor) {
      var target = document.getElementById(anchor);
      if (target) { target.scrollIntoView(); }
    }
  }

  function route() {
    var h = decodeURIComponent((location.hash || "").slice(1));
    var m = /^page-(\d+)$/.exec(h);
    if (m) { show(parseInt(m[1], 10) - 1); return; }
    if (h && byAnchor.has(h)) { show(Math.floor(byAnchor.get(h) / per), h); return; }
    show(0);
  }

  window.addEventListener("hashchange", route);
  route();
})();
