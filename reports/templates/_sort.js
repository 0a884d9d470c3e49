(function () {
  "use strict";
  function key(row, index, type) {
    var cell = row.cells[index];
    if (!cell) { return null; }
    var raw = cell.hasAttribute("data-value") ? cell.getAttribute("data-value") : cell.textContent;
    raw = raw.trim();
    if (raw === "") { return null; }
    if (type === "num") {
      var x = Number(raw);
      return isFinite(x) ? x : null;
    }
    return raw.toLowerCase();
  }
  function sortBy(table, th) {
    var index = th.cellIndex;
    var type = th.getAttribute("data-sort") === "num" ? "num" : "text";
    var dir = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
    var sign = dir === "ascending" ? 1 : -1;
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows).map(function (row, i) {
      return { row: row, key: key(row, index, type), i: i };
    });
    rows.sort(function (a, b) {
      if (a.key === null || b.key === null) {
        if (a.key === b.key) { return a.i - b.i; }
        return a.key === null ? 1 : -1;
      }
      var c = type === "num" ? (a.key < b.key ? -1 : a.key > b.key ? 1 : 0) : a.key.localeCompare(b.key);
      return c !== 0 ? sign * c : a.i - b.i;
    });
    rows.forEach(function (r) { body.appendChild(r.row); });
    var heads = th.parentNode.cells;
    for (var j = 0; j < heads.length; j++) { heads[j].removeAttribute("aria-sort"); }
    th.setAttribute("aria-sort", dir);
  }
  var tables = document.querySelectorAll("table.sortable");
  Array.prototype.forEach.call(tables, function (table) {
    if (!table.tHead || !table.tBodies.length) { return; }
    var heads = table.tHead.querySelectorAll("th[data-sort]");
    Array.prototype.forEach.call(heads, function (th) {
      th.tabIndex = 0;
      th.addEventListener("click", function (e) {
        if (e.target.closest && e.target.closest("a")) { return; }
        sortBy(table, th);
      });
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(table, th); }
      });
    });
  });
})();
(function () {
  "use strict";
  // copy buttons: shown only where a script runs (the command is in the block beside them anyway)
  function copied(button, ok) {
    button.textContent = ok ? "copied" : "select it below";
    button.classList.toggle("copied", ok);
    setTimeout(function () { button.textContent = "copy"; button.classList.remove("copied"); }, 1500);
  }
  function fallback(text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.top = "-1000px";
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    document.body.removeChild(area);
    return ok;
  }
  Array.prototype.forEach.call(document.querySelectorAll("button.copy[data-copy]"), function (button) {
    button.hidden = false;
    button.addEventListener("click", function () {
      var text = button.getAttribute("data-copy");
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(text).then(function () { copied(button, true); },
          function () { copied(button, fallback(text)); });
      } else {
        copied(button, fallback(text));
      }
    });
  });
  // a row's details (details.pop) open one at a time; Escape or a click elsewhere closes them
  var pops = document.querySelectorAll("details.pop");
  function closeAll(except) {
    Array.prototype.forEach.call(pops, function (d) { if (d !== except && d.open) { d.open = false; } });
  }
  Array.prototype.forEach.call(pops, function (d) {
    d.addEventListener("toggle", function () { if (d.open) { closeAll(d); } });
  });
  document.addEventListener("click", function (e) {
    if (!(e.target.closest && e.target.closest("details.pop"))) { closeAll(null); }
  });
  document.addEventListener("keydown", function (e) { if (e.key === "Escape") { closeAll(null); } });
  // filters and search: a row is shown when it matches every chosen value (a data-* attribute may
  // hold several values joined by "|") and holds the search words in its data-search text
  function matches(row, chosen, words) {
    for (var name in chosen) {
      var have = (row.getAttribute("data-" + name) || "").split("|");
      if (have.indexOf(chosen[name]) < 0) { return false; }
    }
    var text = row.getAttribute("data-search") || "";
    for (var i = 0; i < words.length; i++) {
      if (text.indexOf(words[i]) < 0) { return false; }
    }
    return true;
  }
  Array.prototype.forEach.call(document.querySelectorAll("form.filters"), function (form) {
    var ids = (form.getAttribute("data-tables") || "").split(" ");
    var rows = [];
    ids.forEach(function (id) {
      var table = id ? document.getElementById(id) : null;
      if (!table) { return; }
      Array.prototype.forEach.call(table.tBodies, function (body) {
        Array.prototype.forEach.call(body.rows, function (row) {
          if (row.hasAttribute("data-search")) { rows.push(row); }
        });
      });
    });
    var out = form.querySelector("output");
    function apply() {
      var chosen = {};
      Array.prototype.forEach.call(form.querySelectorAll("select"), function (s) {
        if (s.value) { chosen[s.name] = s.value; }
      });
      var box = form.querySelector("input[name=search]");
      var words = (box ? box.value : "").toLowerCase().split(/\s+/).filter(function (w) { return w; });
      var shown = 0;
      rows.forEach(function (row) {
        var ok = matches(row, chosen, words);
        row.hidden = !ok;
        if (ok) { shown += 1; }
      });
      if (out) { out.textContent = shown + " of " + rows.length + " rows shown"; }
      form.setAttribute("data-shown", String(shown));
    }
    form.hidden = false;
    form.addEventListener("input", apply);
    form.addEventListener("change", apply);
    form.addEventListener("submit", function (e) { e.preventDefault(); });
    apply();
  });
})();
