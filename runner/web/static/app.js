// runner web: live parts (the pages work without this file).
// A run page follows its run over server-sent events (its timeline's rows, its events, status and
// counters); the board refreshes when it changes.
(function () {
  "use strict";
  // the waterfall's scale: the run's span in seconds (the server's at the last message, then the
  // browser's clock); open bars grow to now
  function Scale(list) {
    var base = parseFloat(list.dataset.span) || 0, at = Date.now();
    this.set = function (span) { base = span; at = Date.now(); };
    this.now = function () { return base + (Date.now() - at) / 1000; };
  }
  function took(seconds) {
    if (seconds < 1) return Math.round(seconds * 1000) + " ms";
    if (seconds < 60) return seconds.toFixed(1) + " s";
    var m = Math.floor(seconds / 60);
    return m < 60 ? m + " min " + Math.floor(seconds % 60) + " s" : Math.floor(m / 60) + " h " + (m % 60) + " min";
  }
  function redraw(list, scale) {
    var span = Math.max(scale.now(), 0.001);
    list.querySelectorAll("svg.tl-track").forEach(function (svg) {
      svg.setAttribute("viewBox", "0 0 " + span.toFixed(3) + " 10");
      var bar = svg.querySelector("rect");
      var start = parseFloat(bar.dataset.start);
      var seconds = bar.dataset.seconds !== undefined ? parseFloat(bar.dataset.seconds) : span - start;
      bar.setAttribute("width", Math.max(seconds, span * 0.004, 0.001).toFixed(3));
    });
    var label = document.getElementById("tl-span");
    if (label) label.textContent = took(span);
  }
  function putRows(list, html) {
    var box = document.createElement("template");
    box.innerHTML = html;
    Array.prototype.slice.call(box.content.children).forEach(function (row) {
      var old = document.getElementById(row.id);
      if (!old) { list.appendChild(row); return; }
      var was = old.querySelectorAll("details");  // keep what the reader opened
      row.querySelectorAll("details").forEach(function (d, i) { if (was[i] && was[i].open) d.open = true; });
      old.replaceWith(row);
    });
  }
  function followRun(list) {
    var source = new EventSource(list.dataset.stream);
    var events = document.getElementById("events");
    var scale = new Scale(list);
    var ticker = window.setInterval(function () { redraw(list, scale); }, 500);
    source.addEventListener("step", function (ev) {
      if (events) events.insertAdjacentHTML("beforeend", ev.data);
    });
    source.addEventListener("trace", function (ev) {
      putRows(list, ev.data);
      redraw(list, scale);
    });
    source.addEventListener("summary", function (ev) {
      var s = JSON.parse(ev.data);
      var st = document.getElementById("run-status");
      var was = st ? st.dataset.status : s.status;
      if (was !== s.status && (was === "waiting" || s.status === "waiting")) {
        source.close();
        window.location.reload(); // the approval banner comes or goes
        return;
      }
      if (st && was !== s.status) {
        st.dataset.status = s.status;
        var label = st.querySelector(".st");
        if (label) { label.textContent = s.status; label.className = "st st-" + s.status; }
      }
      scale.set(s.span);
      var fields = {"run-turns": s.turns, "run-tokens": s.tokens, "run-cost": s.cost, "tl-count": s.steps};
      Object.keys(s.kinds || {}).forEach(function (k) { fields["tl-n-" + k] = s.kinds[k]; });
      Object.keys(fields).forEach(function (id) {
        var el = document.getElementById(id);
        if (el) el.textContent = fields[id];
      });
      redraw(list, scale);
    });
    source.addEventListener("end", function (ev) {
      source.close();
      window.clearInterval(ticker);
      var st = document.getElementById("run-status");
      if (st) { st.dataset.status = ev.data; st.textContent = ev.data; }
      window.location.reload(); // the final summary, the diffs and the output
    });
  }
  function followBoard(columns) {
    var source = new EventSource(columns.dataset.stream);
    source.addEventListener("changed", function () {
      if (window.htmx) {
        document.body.dispatchEvent(new CustomEvent("board-changed"));
      } else {
        window.location.reload();
      }
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var timeline = document.querySelector("#timeline[data-stream]");
    if (timeline) followRun(timeline);
    var columns = document.querySelector("#columns[data-stream]");
    if (columns) followBoard(columns);
  });
})();
