/* The task form (dashboard/task_form.html). Without this script every field shows and the
   form still saves. With it: only the chosen schedule kind's fields show; only the chosen
   handler type's fields (or the handler as JSON: "Edit the handler as"), the two views
   carrying the same values across; and the next five fire times of the schedule being typed
   (GET /dashboard/schedule-preview, the product's own schedule code), debounced. */
(function () {
  "use strict";

  // Which schedule fields each kind uses.
  var SCHEDULE_FIELDS = {
    schedule_expression: ["cron", "interval"],
    timezone: ["cron", "once"],
    run_at: ["once"],
    schedule_exclude: ["cron", "interval"]
  };
  var EXPRESSION = {
    cron: ["Cron expression", "5 fields: minute hour day-of-month month day-of-week", "*/5 * * * *"],
    interval: ["Interval", "e.g. 30s, 15m, 2h, 1d", "15m"]
  };
  // Per handler type: its inputs' keys and kinds (dashboard/handler_fields.py), and the
  // keys without an input that the JSON view keeps.
  var HANDLERS = {
    shell: { fields: { command: "argv", environment: "env" }, extras: ["resource_requirements", "network"] },
    http: { fields: { method: "text", url: "text", headers: "headers", body: "body" }, extras: ["timeout_seconds", "expected_status"] },
    python: { fields: { callable: "text" }, extras: [] },
    celery: { fields: { task: "text", args: "json", kwargs: "json", queue: "text" }, extras: [] },
    container: { fields: { image: "text", command: "argv", environment: "env" }, extras: ["resource_requirements", "network"] }
  };

  function byId(id) { return document.getElementById(id); }
  function value(name) { var f = byId("id_" + name); return f ? f.value.trim() : ""; }

  // ---- schedule kind --------------------------------------------------------------------

  function showSchedule() {
    var kind = value("schedule_type");
    Object.keys(SCHEDULE_FIELDS).forEach(function (name) {
      var box = byId("field-" + name);
      if (box) box.hidden = SCHEDULE_FIELDS[name].indexOf(kind) < 0;
    });
    var words = EXPRESSION[kind], box = byId("field-schedule_expression");
    if (words && box) {
      box.querySelector("label").textContent = words[0];
      var help = box.querySelector(".help");
      if (help) help.textContent = words[1];
      byId("id_schedule_expression").setAttribute("placeholder", words[2]);
    }
  }

  // ---- handler: words, pairs, JSON --------------------------------------------------------

  function splitWords(text) {  // as Python's shlex.split (quotes and backslashes)
    var words = [], word = null, quote = null;
    for (var i = 0; i < text.length; i++) {
      var c = text[i];
      if (quote) {
        if (c === quote) { quote = null; }
        else if (c === "\\" && quote === '"' && i + 1 < text.length) { word += text[++i]; }
        else { word += c; }
      } else if (c === "'" || c === '"') { quote = c; word = word || ""; }
      else if (c === "\\" && i + 1 < text.length) { word = (word || "") + text[++i]; }
      else if (/\s/.test(c)) { if (word !== null) { words.push(word); word = null; } }
      else { word = (word || "") + c; }
    }
    if (quote) throw new Error("no closing quotation");
    if (word !== null) words.push(word);
    return words;
  }

  function joinWords(words) {
    return words.map(function (w) {
      w = String(w);
      return /^[\w@%+=:,./-]+$/.test(w) ? w : "'" + w.replace(/'/g, "'\"'\"'") + "'";
    }).join(" ");
  }

  function fromText(kind, text) {
    if (kind === "argv") return splitWords(text);
    if (kind === "env" || kind === "headers") {
      var pairs = {}, sep = kind === "env" ? "=" : ":";
      text.split("\n").forEach(function (line) {
        if (!line.trim()) return;
        var at = line.indexOf(sep);
        if (at < 1) throw new Error(kind === "env" ? "write NAME=value" : "write Name: value");
        pairs[line.slice(0, at).trim()] = kind === "env" ? line.slice(at + 1) : line.slice(at + 1).trim();
      });
      return pairs;
    }
    if (kind === "json") return JSON.parse(text);
    if (kind === "body" && /^[\[{]/.test(text.trim())) { try { return JSON.parse(text); } catch (e) { return text; } }
    return text;
  }

  function toText(kind, v) {
    if (v === undefined || v === null) return "";
    if (kind === "argv") return Array.isArray(v) ? joinWords(v) : String(v);
    if (kind === "env" || kind === "headers") {
      if (typeof v !== "object") return JSON.stringify(v);
      return Object.keys(v).map(function (k) { return k + (kind === "env" ? "=" : ": ") + v[k]; }).join("\n");
    }
    if (kind === "json" || (kind === "body" && typeof v !== "string")) return JSON.stringify(v);
    return String(v);
  }

  function jsonArea() { return byId("id_handler_config"); }

  function currentJson() {
    try { var v = JSON.parse(jsonArea().value || "{}"); return v && typeof v === "object" ? v : {}; }
    catch (e) { return null; }
  }

  function fieldsToJson(type) {
    var spec = HANDLERS[type], old = currentJson() || {}, config = {};
    if (!spec) return true;
    spec.extras.forEach(function (k) { if (k in old) config[k] = old[k]; });
    try {
      Object.keys(spec.fields).forEach(function (key) {
        var text = value("h_" + type + "_" + key);
        if (text) config[key] = fromText(spec.fields[key], text);
      });
    } catch (error) { say("Cannot show as JSON: " + error.message); return false; }
    jsonArea().value = JSON.stringify(config, null, 2);
    return true;
  }

  function jsonToFields(type) {
    var spec = HANDLERS[type], config = currentJson();
    if (!spec) return true;
    if (config === null) { say("Cannot show as fields: the JSON does not parse"); return false; }
    Object.keys(spec.fields).forEach(function (key) {
      var field = byId("id_h_" + type + "_" + key);
      if (field) field.value = toText(spec.fields[key], config[key]);
    });
    return true;
  }

  function say(text) {
    var box = byId("field-handler_mode"), note = box && box.querySelector(".help");
    if (note) note.textContent = text;
  }

  function mode() {
    var chosen = document.querySelector("[name=handler_mode]:checked");
    return chosen ? chosen.value : "json";
  }

  function showHandler() {
    var type = value("handler_type"), current = mode();
    document.querySelectorAll("[data-handler-type]").forEach(function (group) {
      group.hidden = group.getAttribute("data-handler-type") !== type;
    });
    document.querySelectorAll("[data-handler-panel]").forEach(function (panel) {
      panel.hidden = panel.getAttribute("data-handler-panel") !== current;
    });
  }

  var shownType = null;

  function handlerTypeChanged() {
    var type = value("handler_type");
    // The JSON view always shows the new type's values (its template until edited), never
    // the previous type's.
    fieldsToJson(type);
    shownType = type;
    showHandler();
  }

  function handlerModeChanged(event) {
    var type = value("handler_type");
    var ok = event.target.value === "json" ? fieldsToJson(type) : jsonToFields(type);
    if (!ok) {  // stays where it was
      var other = document.querySelector("[name=handler_mode][value=" + (event.target.value === "json" ? "fields" : "json") + "]");
      if (other) other.checked = true;
    }
    showHandler();
  }

  // ---- fire preview ---------------------------------------------------------------------

  var timer = null, asked = 0;

  function schedulePreview() {
    window.clearTimeout(timer);
    timer = window.setTimeout(fetchPreview, 300);
  }

  function fetchPreview() {
    var box = byId("schedule-preview");
    if (!box) return;
    var kind = value("schedule_type"), list = byId("schedule-preview-fires"), state = byId("schedule-preview-state");
    if (kind === "manual" || kind === "event" || !kind) {
      list.innerHTML = "";
      state.textContent = "A " + (kind || "manual") + " schedule fires only when triggered.";
      box.hidden = false;
      return;
    }
    if (!value(kind === "once" ? "run_at" : "schedule_expression")) {
      list.innerHTML = "";
      box.removeAttribute("data-preview-state");
      state.className = "help";
      state.textContent = "Type the schedule to see its next fire times.";
      box.hidden = false;
      return;
    }
    var url = new URL(box.getAttribute("data-preview-url"), window.location.href);
    url.searchParams.set("type", kind);
    ["expression:schedule_expression", "timezone:timezone", "run_at:run_at", "exclude:schedule_exclude"].forEach(function (pair) {
      var parts = pair.split(":"), text = value(parts[1]);
      if (text && SCHEDULE_FIELDS[parts[1]].indexOf(kind) >= 0) url.searchParams.set(parts[0], text);
    });
    var mine = ++asked;
    box.setAttribute("aria-busy", "true");
    fetch(url.toString(), { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (response) { return response.json().then(function (body) { return [response.status, body]; }); })
      .then(function (answer) {
        if (mine !== asked) return;  // a newer keystroke's answer wins
        box.hidden = false;
        box.removeAttribute("aria-busy");
        list.innerHTML = "";
        var body = answer[1];
        if (answer[0] !== 200 || (body.errors && body.errors.length)) {
          box.setAttribute("data-preview-state", "error");
          state.className = "error";
          state.textContent = (body.errors || []).map(function (e) { return e.message; }).join("; ") || "cannot preview";
          return;
        }
        box.setAttribute("data-preview-state", "ok");
        state.className = "help";
        state.textContent = body.fires.length ? "In " + body.timezone + "; hover a time for UTC." : "No fire time ahead.";
        body.fires.forEach(function (fire) {
          var item = document.createElement("li"), time = document.createElement("time");
          time.setAttribute("datetime", fire.utc);
          time.setAttribute("title", fire.utc.replace("T", " ").replace("Z", " UTC"));
          time.textContent = fire.local.slice(0, 19).replace("T", " ") + " " + fire.local.slice(19);
          item.appendChild(time);
          list.appendChild(item);
        });
      })
      .catch(function (error) {
        if (mine !== asked) return;
        state.className = "error";
        state.textContent = "preview failed (" + error.message + ")";
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var form = byId("task-form");
    if (!form) return;
    shownType = value("handler_type");
    showSchedule();
    showHandler();
    fetchPreview();
    form.addEventListener("change", function (event) {
      var name = event.target.name;
      if (name === "schedule_type") { showSchedule(); schedulePreview(); }
      else if (name === "handler_type") handlerTypeChanged();
      else if (name === "handler_mode") handlerModeChanged(event);
    });
    form.addEventListener("input", function (event) {
      if (["schedule_expression", "timezone", "run_at", "schedule_exclude"].indexOf(event.target.name) >= 0) schedulePreview();
    });
    form.addEventListener("submit", function () {
      if (mode() === "fields") fieldsToJson(value("handler_type"));  // the JSON view agrees
    });
  });
})();
