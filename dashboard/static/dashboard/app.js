/* Dashboard live updates and charts. No dependencies, nothing loaded from the network
   except this page's own fragment endpoint (?fragment=1), polled every few seconds, and on
   a running execution's page its log endpoints (Server-Sent Events, then the stored log). */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = { success: "#2e9e44", failed: "#d43c3c", other: "#9aa3ad",
                 duration: "#2f6fd6", lag: "#e08a00" };

  function el(name, attrs, parent) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(node);
    return node;
  }

  function frame(container) {
    var width = container.clientWidth || 480, height = 160;
    container.innerHTML = "";
    var svg = el("svg", { width: width, height: height, viewBox: "0 0 " + width + " " + height,
                          role: "img", "aria-label": container.getAttribute("aria-label") || "chart" }, container);
    return { svg: svg, w: width, h: height, pad: 28 };
  }

  function axis(f, max, label) {
    el("line", { x1: f.pad, y1: f.h - f.pad, x2: f.w - 4, y2: f.h - f.pad, stroke: "#ccc" }, f.svg);
    var t = el("text", { x: 2, y: 12, "font-size": 10, fill: "#555" }, f.svg);
    t.textContent = (Math.round(max * 100) / 100) + (label || "");
  }

  function bars(container, rows) {
    var f = frame(container);
    if (!rows.length) { empty(f); return; }
    var max = Math.max.apply(null, rows.map(function (r) { return r.success + r.failed + r.other; })) || 1;
    var step = (f.w - f.pad - 4) / rows.length, plotH = f.h - 2 * f.pad;
    axis(f, max);
    rows.forEach(function (r, i) {
      var y = f.h - f.pad;
      ["success", "failed", "other"].forEach(function (key) {
        var h = plotH * r[key] / max;
        if (h <= 0) return;
        y -= h;
        var rect = el("rect", { x: f.pad + i * step + 1, y: y, width: Math.max(1, step - 2),
                                height: h, fill: COLORS[key], "class": "bar-" + key }, f.svg);
        el("title", {}, rect).textContent = r.t + " " + key + ": " + r[key];
      });
    });
  }

  function lines(container, rows) {
    var f = frame(container);
    if (!rows.length) { empty(f); return; }
    var values = [];
    rows.forEach(function (r) { values.push(r.lag); if (r.duration !== null) values.push(r.duration); });
    var max = Math.max.apply(null, values) || 1, plotH = f.h - 2 * f.pad;
    var step = rows.length > 1 ? (f.w - f.pad - 8) / (rows.length - 1) : 0;
    axis(f, max, " s");
    ["duration", "lag"].forEach(function (key) {
      var points = [];
      rows.forEach(function (r, i) {
        if (r[key] === null || r[key] === undefined) return;
        var x = f.pad + i * step, y = f.h - f.pad - plotH * r[key] / max;
        points.push(x + "," + y);
        var dot = el("circle", { cx: x, cy: y, r: 2.5, fill: r.status === "success" ? COLORS[key] : COLORS.failed,
                                 "class": "dot-" + key }, f.svg);
        el("title", {}, dot).textContent = r.t + " " + key + " " + r[key].toFixed(3) + " s (" + r.status + ")";
      });
      el("polyline", { points: points.join(" "), fill: "none", stroke: COLORS[key], "stroke-width": 1.5 }, f.svg);
    });
  }

  // Per-bucket percentiles (the stats buckets): p50 solid, p95 dashed, for duration and lag;
  // a bucket without runs leaves a gap.
  function quantiles(container, rows) {
    var f = frame(container);
    var keys = ["duration_p50", "duration_p95", "lag_p50", "lag_p95"];
    var values = [];
    rows.forEach(function (r) {
      keys.forEach(function (k) { if (r[k] !== null && r[k] !== undefined) values.push(r[k]); });
    });
    if (!values.length) { empty(f); return; }
    var max = Math.max.apply(null, values) || 1, plotH = f.h - 2 * f.pad;
    var step = rows.length > 1 ? (f.w - f.pad - 8) / (rows.length - 1) : 0;
    axis(f, max, " s");
    // The time axis: the first bucket's start and the last's, in UTC.
    [[0, "start"], [rows.length - 1, "end"]].forEach(function (end) {
      var label = el("text", { x: end[1] === "start" ? f.pad : f.w - 4, y: f.h - 8, "font-size": 10,
                               fill: "#555", "text-anchor": end[1], "class": "axis-time" }, f.svg);
      label.textContent = rows[end[0]].t.slice(0, 16).replace("T", " ");
    });
    keys.forEach(function (key) {
      var what = key.split("_")[0], segment = [];
      function flush() {
        if (segment.length > 1) {
          el("polyline", { points: segment.join(" "), fill: "none", stroke: COLORS[what],
                           "stroke-width": 1.5, "stroke-dasharray": key.slice(-3) === "p95" ? "4 3" : "",
                           "class": "line-" + key }, f.svg);
        }
        segment = [];
      }
      rows.forEach(function (r, i) {
        if (r[key] === null || r[key] === undefined) { flush(); return; }
        var x = f.pad + i * step, y = f.h - f.pad - plotH * r[key] / max;
        segment.push(x + "," + y);
        var dot = el("circle", { cx: x, cy: y, r: 2, fill: COLORS[what], "class": "dot-" + key }, f.svg);
        el("title", {}, dot).textContent = r.t + " " + key.replace("_", " ") + " " +
          r[key].toFixed(3) + " s (" + r.count + " runs)";
      });
      flush();
    });
  }

  function empty(f) {
    var t = el("text", { x: f.w / 2, y: f.h / 2, "text-anchor": "middle", fill: "#888" }, f.svg);
    t.textContent = "no data yet";
  }

  function drawCharts(root) {
    var dataNode = root.querySelector("#chart-data");
    if (!dataNode) return;
    var data = JSON.parse(dataNode.textContent);
    root.querySelectorAll("[data-chart]").forEach(function (c) {
      var rows = data[c.getAttribute("data-series")] || [];
      var kind = c.getAttribute("data-chart");
      (kind === "bars" ? bars : kind === "quantiles" ? quantiles : lines)(c, rows);
    });
  }

  // A fragment may say nothing more will change (a finished DAG run: data-live-final);
  // then the page stops polling.
  function finished(live) {
    var marker = live.querySelector("[data-live-final]");
    if (!marker) return false;
    live.setAttribute("data-polling", "stopped");
    var stamp = document.getElementById("updated-at");
    if (stamp) stamp.textContent = "final (" + marker.getAttribute("data-live-final") + "), no more updates";
    return true;
  }

  /* Patching instead of replacing: the new fragment is merged into the live region node by
     node, so an element that did not change is the same element afterwards. A focused link or
     button keeps its focus, a scrolled table its scroll, a screen reader its place. Written
     here (about 60 lines) rather than vendored (htmx + idiomorph): the fragments are small,
     server-rendered and keyed by ids the templates already carry. */
  var KEYS = ["id", "data-execution-id", "data-run-id", "data-node-id", "data-dag-id", "data-task-id",
              "data-worker", "data-day"];

  function keyOf(node) {
    if (node.nodeType !== 1) return null;
    for (var i = 0; i < KEYS.length; i++) {
      var value = node.getAttribute(KEYS[i]);
      if (value) return KEYS[i] + "=" + value;
    }
    return null;
  }

  function sameKind(a, b) {
    return a.nodeType === b.nodeType && a.nodeName === b.nodeName && keyOf(a) === keyOf(b);
  }

  function morphAttributes(from, to) {
    Array.prototype.slice.call(from.attributes).forEach(function (attr) {
      if (!to.hasAttribute(attr.name)) from.removeAttribute(attr.name);
    });
    Array.prototype.slice.call(to.attributes).forEach(function (attr) {
      if (from.getAttribute(attr.name) !== attr.value) from.setAttribute(attr.name, attr.value);
    });
  }

  // A time the script has put in the browser's zone, or a ticking "running for": the same
  // instant from the server is no change (its UTC text would only be rewritten again).
  function sameInstant(from, to) {
    if (from.nodeType !== 1 || to.nodeType !== 1) return false;
    if (from.hasAttribute("data-local") && from.getAttribute("datetime") === to.getAttribute("datetime")) return true;
    return from.hasAttribute("data-running-since") &&
      from.getAttribute("data-running-since") === to.getAttribute("data-running-since");
  }

  function morphChildren(from, to, changes) {
    if (from.hasAttribute && from.hasAttribute("data-chart")) return;  // drawn by script
    var wanted = Array.prototype.slice.call(to.childNodes);
    var index = 0;
    wanted.forEach(function (next) {
      var current = from.childNodes[index];
      if (current && !sameKind(current, next)) {
        // A keyed element further on (a row that moved): bring it here instead of rebuilding.
        var key = keyOf(next), found = null;
        if (key) {
          for (var j = index + 1; j < from.childNodes.length; j++) {
            if (keyOf(from.childNodes[j]) === key && from.childNodes[j].nodeName === next.nodeName) {
              found = from.childNodes[j]; break;
            }
          }
        }
        if (found) { from.insertBefore(found, current); current = found; }
        else { current = null; }
      }
      if (!current) {
        from.insertBefore(document.importNode(next, true), from.childNodes[index] || null);
        changes.added++;
      } else if (current.nodeType === 3 || current.nodeType === 8) {
        if (current.nodeValue !== next.nodeValue) { current.nodeValue = next.nodeValue; changes.text++; }
      } else if (sameInstant(current, next)) {
        // unchanged: keeps its local text
      } else if (current.nodeType === 1) {
        morphAttributes(current, next);
        if (current === document.activeElement && /^(INPUT|SELECT|TEXTAREA)$/.test(current.nodeName)) {
          // never overwrite what someone is typing
        } else {
          morphChildren(current, next, changes);
        }
      }
      index++;
    });
    while (from.childNodes.length > index) { from.removeChild(from.lastChild); changes.removed++; }
  }

  // A table wider than the screen scrolls sideways (phones): it takes keyboard focus so it
  // can be scrolled without a mouse.
  function focusableScrollers(root) {
    root.querySelectorAll("table, .table-scroll").forEach(function (box) {
      if (box.scrollWidth > box.clientWidth + 1) box.setAttribute("tabindex", "0");
    });
  }

  function statusTexts(root) {
    return Array.prototype.map.call(root.querySelectorAll(".status"), function (s) { return s.textContent; });
  }

  // While someone is filling a form, choosing in a select or a menu is open, the page waits:
  // a refresh would move what they are working on.
  function busy(live) {
    var active = document.activeElement;
    if (active && active.closest && active.closest("form") && /^(INPUT|SELECT|TEXTAREA)$/.test(active.nodeName)) return true;
    return !!live.querySelector("details[open]") || live.getAttribute("data-paused") === "true";
  }

  function announce(text) {
    var region = document.getElementById("live-announcer");
    if (!region || !text) return;
    region.textContent = "";
    window.setTimeout(function () { region.textContent = text; }, 50);
  }

  function patch(live, html) {
    var fresh = document.createElement("div");
    fresh.innerHTML = html;
    var before = statusTexts(live);
    var changes = { added: 0, removed: 0, text: 0 };
    morphChildren(live, fresh, changes);
    var after = statusTexts(live), changed = 0;
    for (var i = 0; i < Math.max(before.length, after.length); i++) if (before[i] !== after[i]) changed++;
    if (changed) announce(changed + " state" + (changed === 1 ? "" : "s") + " changed: " + after.slice(0, 3).join(", "));
    live.setAttribute("data-last-patch", changes.added + "+" + changes.removed + "-" + changes.text + "~");
  }

  function poll(live, seconds) {
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    var done = false;
    if (busy(live)) {
      var waiting = document.getElementById("updated-at");
      if (waiting) waiting.textContent = "paused while you use a form";
      window.setTimeout(function () { poll(live, seconds); }, seconds * 1000);
      return;
    }
    fetch(url.toString(), { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (response) {
        if (response.redirected || !response.ok) throw new Error("status " + response.status);
        return response.text();
      })
      .then(function (html) {
        if (busy(live)) return;  // focus moved into a form while the request was out
        patch(live, html);
        localTimes(live);
        drawCharts(live);
        focusableScrollers(live);
        var stamp = document.getElementById("updated-at");
        if (stamp) stamp.textContent = new Date().toISOString().substr(11, 8) + " UTC";
        live.setAttribute("data-refreshes", String(Number(live.getAttribute("data-refreshes") || 0) + 1));
        done = finished(live);
      })
      .catch(function (error) {
        var stamp = document.getElementById("updated-at");
        if (stamp) stamp.textContent = "update failed (" + error.message + "), retrying";
      })
      .finally(function () {
        if (!done) window.setTimeout(function () { poll(live, seconds); }, seconds * 1000);
      });
  }

  /* Times in the viewer's zone. The server writes <time datetime="…Z" data-local="datetime|
     time|precise" title="… UTC">… UTC</time> (dashboard/templatetags/time_tags.py): right
     without script, and here rewritten in the browser's zone with its abbreviation; the title
     keeps UTC. A "running for" (data-running-since) ticks every second. */
  function pad(n, width) { n = String(n); while (n.length < (width || 2)) n = "0" + n; return n; }

  var zoneParts = null;
  function zoned(date) {
    if (!zoneParts) {
      zoneParts = new Intl.DateTimeFormat("en-US", {
        year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
        second: "2-digit", hourCycle: "h23", timeZoneName: "short" });
    }
    var parts = {};
    zoneParts.formatToParts(date).forEach(function (p) { parts[p.type] = p.value; });
    return parts;
  }

  function localTimes(root) {
    root.querySelectorAll("time[data-local]").forEach(function (node) {
      var date = new Date(node.getAttribute("datetime"));
      if (isNaN(date.getTime())) return;
      var p = zoned(date), style = node.getAttribute("data-local");
      var clock = p.hour + ":" + p.minute + ":" + p.second;
      if (style === "precise") clock += "." + pad(date.getUTCMilliseconds(), 3);
      var day = p.year + "-" + p.month + "-" + p.day;
      node.textContent = (style === "time" ? clock : day + " " + clock) + " " + p.timeZoneName;
      node.setAttribute("data-zoned", p.timeZoneName);
    });
  }

  function duration(seconds) {
    if (seconds < 1) return Math.round(seconds * 1000) + " ms";
    if (seconds < 60) return seconds.toFixed(1) + " s";
    var minutes = Math.floor(seconds / 60), secs = Math.floor(seconds % 60);
    if (minutes < 60) return minutes + "m " + pad(secs) + "s";
    return Math.floor(minutes / 60) + "h " + pad(minutes % 60) + "m";
  }

  function tickElapsed() {
    document.querySelectorAll("[data-running-since]").forEach(function (node) {
      var since = new Date(node.getAttribute("data-running-since")).getTime();
      if (!isNaN(since)) node.textContent = "running for " + duration(Math.max(0, (Date.now() - since) / 1000));
    });
  }

  /* The execution page's progress bar, moved by the log stream's `progress` events between
     the polls that re-render it. */
  function showProgress(p) {
    var box = document.getElementById("progress");
    if (!box) return;
    var bar = box.querySelector("progress");
    var text = box.querySelector(".progress-text");
    var percent = Math.round(p.percent * 100) / 100;
    if (bar) { bar.value = p.percent; bar.textContent = percent + "%"; }
    if (text) text.textContent = percent + "%" + (p.message ? " · " + p.message : "");
    box.hidden = false;
  }

  // A select that navigates (the tenant switch, the missed-schedules window) goes only when
  // asked: its button, or Enter on the select (WCAG 3.2.2: choosing alone changes nothing;
  // arrowing through the options must not load a page per option).
  document.addEventListener("keydown", function (event) {
    var field = event.target;
    if (event.key !== "Enter" || !field.hasAttribute || !field.hasAttribute("data-submit-on-enter")) return;
    if (!field.form) return;
    event.preventDefault();
    if (field.form.requestSubmit) field.form.requestSubmit(); else field.form.submit();
  });

  // Delete and cancel ask first: a form with data-confirm submits only when confirmed.
  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  });

  /* Live log tail: the server replays the run's Redis stream from its start and follows it
     (EventSource reconnects by itself, resuming from Last-Event-ID). When the run ends the
     stored log replaces the tail: it is the record (masked, capped) the run left behind. */
  function followLog(pre) {
    var eventsUrl = pre.getAttribute("data-log-events");
    if (!eventsUrl || !window.EventSource) return;
    var state = document.getElementById("log-state");
    var keep = parseInt(pre.getAttribute("data-log-lines"), 10) || 200;
    var lines = [];
    var source = new EventSource(eventsUrl);
    pre.setAttribute("data-log-mode", "live");
    function say(text) { if (state) state.textContent = text; }
    source.onopen = function () { say("following the live tail"); };
    function show(text) {
      var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      Array.prototype.push.apply(lines, text.split("\n"));
      if (lines.length > keep) lines.splice(0, lines.length - keep);
      pre.textContent = lines.join("\n");
      pre.setAttribute("data-log-lines-seen", String(Number(pre.getAttribute("data-log-lines-seen") || 0) + 1));
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }
    source.onmessage = function (event) { show(event.data); };
    source.onerror = function () { say("log stream interrupted, reconnecting"); };
    // The live-log budget is spent: the tail stops here; the stored log comes at the end.
    source.addEventListener("cut", function (event) {
      show(event.data);
      pre.setAttribute("data-log-cut", "true");
      say("live tail cut (budget spent); the stored log is shown when the run ends");
    });
    source.addEventListener("progress", function (event) { showProgress(JSON.parse(event.data)); });
    source.addEventListener("end", function (event) {
      source.close();
      say("run ended (" + event.data + "): loading the stored log");
      fetch(pre.getAttribute("data-log-text"), { credentials: "same-origin" })
        .then(function (response) {
          if (!response.ok) throw new Error("status " + response.status);
          return response.text();
        })
        .then(function (text) {
          if (text) pre.textContent = text;
          pre.setAttribute("data-log-mode", "stored");
          say("run ended (" + event.data + "): stored log, last " + keep + " lines");
        })
        .catch(function (error) { say("run ended (" + event.data + "); stored log not loaded: " + error.message); });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    window.setInterval(tickElapsed, 1000);  // (a poll may bring a running run in later)
    // A refused form: its summary of every mistake takes focus (read out, links to each field).
    var summary = document.getElementById("form-errors");
    if (summary) summary.focus();
    // A refused definition: the error's line is selected in the editor when followed.
    var lineLink = document.getElementById("error-line");
    var editor = document.getElementById("definition");
    if (lineLink && editor) {
      lineLink.addEventListener("click", function (event) {
        event.preventDefault();
        var lines = editor.value.split("\n"), line = Number(lineLink.getAttribute("data-line")) - 1;
        var start = lines.slice(0, line).join("\n").length + (line > 0 ? 1 : 0);
        editor.focus();
        editor.setSelectionRange(start, start + (lines[line] || "").length);
      });
    }
    var log = document.getElementById("log");
    if (log) followLog(log);
    var live = document.getElementById("live");
    if (!live) return;
    drawCharts(live);
    focusableScrollers(document);
    if (finished(live)) return;
    var seconds = parseFloat(live.getAttribute("data-poll-seconds")) || 3;
    window.setTimeout(function () { poll(live, seconds); }, seconds * 1000);
  });
})();
