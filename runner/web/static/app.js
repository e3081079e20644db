// runner web: live parts (the pages work without this file).
// A run page follows its run over server-sent events; the board refreshes when it changes.
(function () {
  "use strict";
  function followRun(list) {
    var source = new EventSource(list.dataset.stream);
    source.addEventListener("step", function (ev) {
      list.insertAdjacentHTML("beforeend", ev.data);
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
