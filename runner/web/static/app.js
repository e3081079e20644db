// runner web: live parts (the pages work without this file).
// A run page follows its run over server-sent events (steps, status and counters); the board
// refreshes when it changes.
(function () {
  "use strict";
  function followRun(list) {
    var source = new EventSource(list.dataset.stream);
    source.addEventListener("step", function (ev) {
      list.insertAdjacentHTML("beforeend", ev.data);
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
      var fields = {"run-turns": s.turns, "run-tokens": s.tokens, "run-cost": s.cost};
      Object.keys(fields).forEach(function (id) {
        var el = document.getElementById(id);
        if (el) el.textContent = fields[id];
      });
    });
    source.addEventListener("end", function (ev) {
      source.close();
      var st = document.getElementById("run-status");
      if (st) { st.dataset.status = ev.data; st.textContent = ev.data; }
      window.location.reload(); // the final summary and the output
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
