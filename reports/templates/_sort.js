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
