/* es-sched console: the two behaviours htmx lacks, no framework.
 *
 * 1. A refused request is never dropped: htmx swaps nothing on a 4xx/5xx, so the server's
 *    reason (Conductor's error body, {status, code, message}) is shown where the request's
 *    answer would have gone (its hx-target), else in the page's #flash.
 * 2. Graphs keep a readable size: the chosen zoom (fit, 100 %, 150 %) is kept on <body> and in
 *    localStorage, so it survives the live fragment's re-reads and the next page.
 */
(function () {
  "use strict";

  function reason(xhr) {
    try {
      var body = JSON.parse(xhr.responseText);
      if (body && body.message) return body.message;
    } catch (e) { /* not JSON: the text itself */ }
    return (xhr.responseText || "").slice(0, 500) || xhr.statusText || "no answer";
  }

  function show(target, text, status) {
    var box = document.createElement("div");
    box.className = "notice error refused";
    box.setAttribute("role", "alert");
    box.dataset.status = String(status);
    box.textContent = (status ? "Refused (" + status + "): " : "Not sent: ") + text;
    var where = (target && target.id && target.id !== "live" && !target.closest("#live")) ? target
      : document.getElementById("flash");
    if (!where) { where = document.body; }
    where.replaceChildren(box);
  }

  document.addEventListener("htmx:responseError", function (evt) {
    show(evt.detail.target, reason(evt.detail.xhr), evt.detail.xhr.status);
  });
  document.addEventListener("htmx:sendError", function (evt) {
    show(evt.detail.target, "the server did not answer", 0);
  });

  var ZOOMS = ["fit", "1", "1.5", "2"];
  function zoom(value) {
    if (ZOOMS.indexOf(value) < 0) value = "1";
    document.body.dataset.zoom = value;
    try { localStorage.setItem("es-sched-zoom", value); } catch (e) { /* private mode */ }
    document.querySelectorAll("[data-zoom-to]").forEach(function (b) {
      b.classList.toggle("on", b.dataset.zoomTo === value);
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var kept = null;
    try { kept = localStorage.getItem("es-sched-zoom"); } catch (e) { /* private mode */ }
    zoom(kept || "1");
  });
  document.addEventListener("click", function (evt) {
    var button = evt.target.closest && evt.target.closest("[data-zoom-to]");
    if (button) { evt.preventDefault(); zoom(button.dataset.zoomTo); }
  });
})();
