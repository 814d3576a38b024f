/* The task and DAG pages' dialogs (trigger with parameters, backfill). Progressive: each
   dialog's button is a link to a page holding the same form, so without this script the
   link is followed; with it the <dialog> opens in place. The trigger form's "fields" and
   "JSON" views hold the same values: switching copies them across. The backfill's dry run is
   sent with fetch and its answer (the same form, its plan filled in) replaces the form. */
(function () {
  "use strict";

  function opener(event) {
    var link = event.target.closest && event.target.closest("[data-open-dialog]");
    if (!link) return;
    var dialog = document.getElementById(link.getAttribute("data-open-dialog"));
    if (!dialog || !dialog.showModal) return;  // no <dialog> support: the page instead
    event.preventDefault();
    dialog.showModal();
    var first = dialog.querySelector("input:not([type=hidden]):not([type=radio]), textarea, select");
    if (first) first.focus();
  }

  function closer(event) {
    var button = event.target.closest && event.target.closest("[data-close-dialog]");
    if (!button) return;
    var dialog = button.closest("dialog");
    if (dialog) dialog.close();
  }

  // ---- trigger with parameters: fields <-> JSON ----------------------------------------

  function valueOf(input) {
    var kind = input.getAttribute("data-kind"), text = input.value.trim();
    if (kind === "boolean") return input.checked;
    if (text === "") return undefined;
    if (kind === "integer" || kind === "number") {
      var number = Number(text);
      return isNaN(number) ? text : number;
    }
    if (kind === "json") {
      try { return JSON.parse(text); } catch (e) { return text; }
    }
    return text;
  }

  function fieldsToJson(form) {
    var values = {};
    form.querySelectorAll("[data-param]").forEach(function (input) {
      var value = valueOf(input);
      if (value !== undefined) values[input.getAttribute("data-param")] = value;
    });
    form.querySelector("[name=parameters_json]").value = JSON.stringify(values, null, 2);
  }

  function jsonToFields(form) {
    var problem = form.querySelector("[data-json-problem]");
    var values;
    try {
      values = JSON.parse(form.querySelector("[name=parameters_json]").value || "{}");
      if (!values || typeof values !== "object" || Array.isArray(values)) throw new Error("not a JSON object");
    } catch (error) {
      if (problem) { problem.textContent = "Cannot show as fields: " + error.message; problem.hidden = false; }
      return false;
    }
    if (problem) problem.hidden = true;
    form.querySelectorAll("[data-param]").forEach(function (input) {
      var value = values[input.getAttribute("data-param")];
      if (input.getAttribute("data-kind") === "boolean") { input.checked = value === true; return; }
      if (value === undefined || value === null) { input.value = ""; return; }
      input.value = input.getAttribute("data-kind") === "json" ? JSON.stringify(value) : String(value);
    });
    return true;
  }

  function showMode(form, mode) {
    form.querySelectorAll("[data-mode-panel]").forEach(function (panel) {
      panel.hidden = panel.getAttribute("data-mode-panel") !== mode;
    });
    form.setAttribute("data-mode", mode);
  }

  function modeSwitched(event) {
    var radio = event.target;
    if (!radio.hasAttribute || !radio.hasAttribute("data-mode-switch")) return;
    var form = radio.form;
    if (radio.value === "json") { fieldsToJson(form); showMode(form, "json"); return; }
    if (jsonToFields(form)) { showMode(form, "fields"); return; }
    form.querySelector("[data-mode-switch][value=json]").checked = true;  // stays on JSON
  }

  function setUpParameterForms(root) {
    root.querySelectorAll("[data-parameters-form]").forEach(function (form) {
      var chosen = form.querySelector("[data-mode-switch]:checked");
      if (chosen) showMode(form, chosen.value);
    });
  }

  // ---- backfill: the dry run in place -----------------------------------------------------

  function dryRun(event) {
    var form = event.target;
    if (!form.hasAttribute || !form.hasAttribute("data-backfill-form") || !form.closest("dialog")) return;
    var submitter = event.submitter;
    if (!submitter || submitter.value !== "dry_run" || !window.fetch) return;
    event.preventDefault();
    var body = new FormData(form);
    body.set("intent", "dry_run");
    var plan = form.querySelector("#backfill-plan");
    if (plan) plan.setAttribute("aria-busy", "true");
    fetch(form.action, { method: "POST", body: body, credentials: "same-origin",
                         headers: { "X-Requested-With": "fetch" } })
      .then(function (response) {
        if (response.status !== 200 && response.status !== 400) throw new Error("status " + response.status);
        return response.text();
      })
      .then(function (html) {
        var holder = document.createElement("div");
        holder.innerHTML = html;
        var fresh = holder.querySelector("form");
        form.replaceWith(fresh);
        var focus = fresh.querySelector("[aria-invalid=true]") || fresh.querySelector("#backfill-plan");
        if (focus) focus.focus();
      })
      .catch(function (error) {
        if (plan) { plan.removeAttribute("aria-busy"); plan.textContent = "The dry run failed (" + error.message + ")"; }
      });
  }

  // ---- a form whose fields depend on a kind (the channel form) ---------------------------

  function showKind(select) {
    var kind = select.value;
    select.form.querySelectorAll("[data-for-kinds]").forEach(function (box) {
      var shown = box.getAttribute("data-for-kinds").split(" ").indexOf(kind) >= 0;
      box.hidden = !shown;
      box.querySelectorAll("input, select, textarea").forEach(function (input) { input.disabled = !shown; });
    });
  }

  document.addEventListener("change", function (event) {
    if (event.target.hasAttribute && event.target.hasAttribute("data-kind-select")) showKind(event.target);
  });
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-kind-select]").forEach(showKind);
  });

  document.addEventListener("click", opener);
  document.addEventListener("click", closer);
  document.addEventListener("change", modeSwitched);
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.hasAttribute && form.hasAttribute("data-parameters-form") && form.getAttribute("data-mode") === "fields") {
      fieldsToJson(form);  // the JSON view follows the fields, should the server show it again
    }
    dryRun(event);
  });
  document.addEventListener("DOMContentLoaded", function () { setUpParameterForms(document); });
})();
