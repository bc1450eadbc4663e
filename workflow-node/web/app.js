// The web view's pages: plain JavaScript over the JSON API (docs/http.md), no build step.
// Routes: #/mesh, #/workflow/NAME, #/run/ID, #/runs, #/schedules.
"use strict";

const main = document.getElementById("main");
let stop = () => {}; // ends the current page's polling or event stream
let diagrams = 0;
mermaid.initialize({ startOnLoad: false, securityLevel: "strict" });

// An element: h("td", {class: "x"}, "text", child, ...).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function table(headers, rows) {
  return h("table", {}, h("tr", {}, headers.map((t) => h("th", {}, t))), rows);
}

async function api(method, path, body) {
  const init = { method, headers: {} };
  // The API takes JSON only (docs/http.md, "Requests from other pages"): a POST always
  // sends a JSON body, if only {}.
  if (body === undefined && method !== "GET") body = {};
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const token = sessionStorage.getItem("token");
  if (token) init.headers["Authorization"] = "Bearer " + token;
  const r = await fetch(path, init);
  if (r.status === 401 && !init.retried) {
    // The API wants a token (docs/http.md, access): ask once, keep it for this tab.
    const given = prompt("This web view needs an access token:");
    if (given) {
      sessionStorage.setItem("token", given.trim());
      return api(method, path, body);
    }
  }
  const v = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) throw new Error(v.error || r.statusText);
  return v;
}

async function drawDiagram(el, source) {
  if (!source) { el.replaceChildren("(no diagram)"); return; }
  try {
    const { svg } = await mermaid.render("diagram" + diagrams++, source);
    el.innerHTML = svg;
  } catch (e) {
    el.replaceChildren(h("pre", {}, source));
  }
}

function status(s) { return h("span", { class: "status st-" + s }, s); }
function when(t) { return t ? t.replace("T", " ").replace(/\.\d+Z$/, "Z") : "-"; }
function pre(v) { return h("pre", {}, JSON.stringify(v, null, 2)); }
function failed(e) { main.replaceChildren(h("p", { class: "error" }, String(e.message || e))); }

// Mesh: every card, refreshed every few seconds.
function meshPage() {
  main.replaceChildren(h("h1", {}, "Mesh"), h("div", { id: "cards" }, "Loading…"));
  const load = async () => {
    const cards = await api("GET", "/api/cards");
    const rows = cards.map((c) => h("tr", { "data-card": c.name },
      h("td", {}, c.kind === "workflow" ? h("a", { href: "#/workflow/" + encodeURIComponent(c.name) }, c.name) : c.name),
      h("td", {}, c.kind), h("td", {}, c.description),
      h("td", {}, (c.skills || []).map((s) => s.name).join(", ")),
      h("td", {}, c.input_schema ? h("details", {}, h("summary", {}, "input"), pre(c.input_schema)) : "-",
        c.output_schema ? h("details", {}, h("summary", {}, "output"), pre(c.output_schema)) : ""),
      h("td", {}, Math.round(c.seen_ms_ago / 1000) + " s ago")));
    document.getElementById("cards").replaceChildren(
      table(["Name", "Kind", "Description", "Skills", "Schemas", "Last seen"], rows));
  };
  load().catch(failed);
  const timer = setInterval(() => load().catch(failed), 5000);
  stop = () => clearInterval(timer);
}

// A form field for each property of an object schema; a JSON text area otherwise.
function inputForm(schema) {
  const props = schema && schema.type === "object" && schema.properties;
  if (!props) {
    const area = h("textarea", { id: "input-json", rows: 6 }, "{}");
    return { el: h("label", {}, "Input (JSON)", area), value: () => JSON.parse(area.value) };
  }
  const required = new Set(schema.required || []);
  const fields = Object.entries(props).map(([name, p]) => {
    let input;
    if (p.type === "boolean") input = h("input", { type: "checkbox", name });
    else if (p.type === "number" || p.type === "integer") input = h("input", { type: "number", name, step: p.type === "integer" ? "1" : "any" });
    else if (p.type === "string") input = h("input", { type: "text", name });
    else input = h("textarea", { name, rows: 3, placeholder: "JSON" });
    if (required.has(name)) input.required = true;
    return { name, p, input, el: h("label", {}, name + (required.has(name) ? " *" : "") + " ", input,
      p.description ? h("small", {}, " " + p.description) : null) };
  });
  const value = () => {
    const v = {};
    for (const { name, p, input } of fields) {
      if (p.type === "boolean") v[name] = input.checked;
      else if (input.value === "") continue;
      else if (p.type === "number" || p.type === "integer") v[name] = Number(input.value);
      else if (p.type === "string") v[name] = input.value;
      else v[name] = JSON.parse(input.value);
    }
    return v;
  };
  return { el: h("div", {}, fields.map((f) => f.el)), value };
}

function runRows(runs) {
  return runs.map((r) => h("tr", {},
    h("td", {}, h("a", { href: "#/run/" + r.execution_id }, r.execution_id)),
    h("td", {}, r.workflow), h("td", {}, status(r.status)), h("td", {}, when(r.started_at)),
    h("td", {}, r.duration_ms === null ? "-" : r.duration_ms + " ms"), h("td", {}, r.caller || "-")));
}
const runHeaders = ["Run", "Workflow", "Status", "Started", "Duration", "Caller"];

// Workflow: its diagram, schemas, a form to start a run, its recent runs.
async function workflowPage(name) {
  const card = await api("GET", "/api/cards/" + encodeURIComponent(name));
  const diagram = h("div", { class: "diagram", id: "diagram" });
  const form = inputForm(card.input_schema);
  const message = h("p", { class: "error", id: "start-error" });
  const submit = async (ev) => {
    ev.preventDefault();
    message.textContent = "";
    try {
      const started = await api("POST", "/api/workflows/" + encodeURIComponent(name) + "/runs", { input: form.value() });
      location.hash = "#/run/" + started.execution_id;
    } catch (e) { message.textContent = e.message; }
  };
  const runs = h("div", {}, "Loading…");
  main.replaceChildren(h("h1", {}, name), h("p", {}, card.description), diagram,
    h("h2", {}, "Start a run"), h("form", { id: "start-form", onsubmit: submit }, form.el,
      h("button", { type: "submit", id: "start" }, "Start"), message),
    h("h2", {}, "Recent runs"), runs,
    h("h2", {}, "Schemas"), h("h3", {}, "Input"), pre(card.input_schema), h("h3", {}, "Output"), pre(card.output_schema));
  await drawDiagram(diagram, card.mermaid);
  const list = await api("GET", "/api/runs?limit=20&workflow=" + encodeURIComponent(name));
  runs.replaceChildren(table(runHeaders, runRows(list)));
}

// Run: live from its event stream.
function runPage(id) {
  main.replaceChildren(h("p", {}, "Loading…"));
  const token = sessionStorage.getItem("token");
  const events = new EventSource("/api/runs/" + encodeURIComponent(id) + "/events" +
    (token ? "?access_token=" + encodeURIComponent(token) : ""));
  stop = () => events.close();
  let shownDiagram = null;
  const diagram = h("div", { class: "diagram", id: "diagram" });
  const body = h("div", {});
  const history = h("div", {});
  const note = h("p", { class: "error", id: "action-error" });
  // What the run's agents say: their words, quoted after their names, never as ours.
  const words = h("ul", { class: "agent-words", id: "agent-words" });
  main.replaceChildren(h("h1", {}, "Run ", h("code", {}, id)), note, diagram, body,
    h("h2", {}, "Agents say"), words, h("h2", {}, "History"), history);
  const act = async (path, payload) => {
    note.textContent = "";
    try { await api("POST", "/api/runs/" + encodeURIComponent(id) + "/" + path, payload); }
    catch (e) { note.textContent = e.message; }
  };
  const render = async (run) => {
    const ended = ["success", "failure", "cancelled", "timed_out"].includes(run.status);
    const nodes = run.nodes.map((n) => h("tr", { "data-node": n.id, "data-status": n.status },
      h("td", {}, n.id), h("td", {}, n.type), h("td", {}, status(n.status)), h("td", {}, n.attempts || "-"),
      h("td", {}, n.duration_ms === null ? "-" : n.duration_ms + " ms"), h("td", { class: "error" }, n.error || "")));
    const waiting = Object.entries(run.waiting || {}).map(([node, ask]) => {
      const comment = h("textarea", { rows: 2, placeholder: "comment", id: "comment-" + node });
      const decide = (verb) => act(verb, { node, comment: comment.value || undefined });
      return h("div", { class: "waiting", "data-waiting": node }, h("strong", {}, node), ": ", ask.message || "waiting for a decision",
        " (", (ask.approvers || []).join(", ") || "anyone", ")", h("br"), comment, h("br"),
        h("button", { id: "approve-" + node, onclick: () => decide("approve") }, "Approve"),
        h("button", { id: "reject-" + node, onclick: () => decide("reject") }, "Reject"));
    });
    const waits = (run.waits_for || []).map((w) => h("li", { "data-wait": w.kind },
      h("strong", {}, w.kind), w.node ? [" ", h("code", {}, w.node)] : null, ": ", w.detail,
      w.until ? " (until " + when(w.until) + ")" : ""));
    const signals = ((run.signals || {}).waiting || []).map((w) => {
      const data = h("textarea", { rows: 3, placeholder: "payload (JSON)", id: "signal-data-" + w.node });
      const send = () => {
        let payload;
        try { payload = data.value.trim() ? JSON.parse(data.value) : null; }
        catch (e) { note.textContent = "the payload is not JSON: " + e.message; return; }
        act("signal", { signal: w.signal, data: payload });
      };
      return h("div", { class: "waiting", "data-signal": w.node }, h("strong", {}, w.node), ": waits for signal '", w.signal, "'",
        w.key ? " (key " + w.key + ")" : "", " since ", when(w.since), w.deadline ? ", until " + when(w.deadline) : "",
        h("br"), data, h("br"), h("button", { id: "signal-" + w.node, onclick: send }, "Send signal"));
    });
    // replaceChildren would print a null or an array as text: h() skips and flattens.
    body.replaceChildren(h("div", {},
      h("p", {}, "Workflow ", h("a", { href: "#/workflow/" + encodeURIComponent(run.workflow) }, run.workflow),
        " · status ", h("span", { id: "run-status", "data-status": run.status }, status(run.status)),
        " · started ", when(run.started_at), run.duration_ms !== null ? " · " + run.duration_ms + " ms" : "",
        run.queue ? [" · ", h("span", { id: "run-queue" }, run.queue)] : null),
      ended ? null : h("button", { id: "cancel", onclick: () => act("cancel", {}) }, "Cancel"),
      h("div", { id: "waiting" }, waiting, signals),
      waits.length ? [h("h2", {}, "Waits for"), h("ul", { id: "waits-for" }, waits)] : null,
      h("h2", {}, "Nodes"),
      table(["Node", "Type", "Status", "Attempts", "Duration", "Error"], nodes),
      h("h2", {}, "Input"), pre(run.input),
      h("h2", {}, "Output"), h("pre", { id: "output" }, JSON.stringify(run.output, null, 2)),
      run.error ? h("p", { class: "error" }, run.error.message || JSON.stringify(run.error)) : null));
    if (run.mermaid !== shownDiagram) {
      shownDiagram = run.mermaid;
      await drawDiagram(diagram, run.mermaid);
    }
    const entries = await api("GET", "/api/runs/" + encodeURIComponent(id) + "/history").catch(() => []);
    history.replaceChildren(table(["#", "Time", "Event", "Node", "Attempt", "Detail"], entries.map((e) =>
      h("tr", {}, h("td", {}, e.n), h("td", {}, new Date(e.at).toISOString()), h("td", {}, e.event),
        h("td", {}, e.node || "-"), h("td", {}, e.attempt || "-"), h("td", {}, e.detail || "")))));
  };
  events.addEventListener("run", (ev) => render(JSON.parse(ev.data)));
  events.addEventListener("status", (ev) => {
    const s = JSON.parse(ev.data);
    if (s.says === null || s.says === undefined) return;
    words.prepend(h("li", { "data-node": s.node_id },
      h("span", { class: "speaker" }, s.agent), " says: ", h("q", { class: "agent-text" }, s.says)));
    while (words.children.length > 20) words.lastChild.remove();
  });
  events.addEventListener("end", () => events.close());
  events.addEventListener("error", (ev) => { if (ev.data) note.textContent = JSON.parse(ev.data).error; });
}

// Runs: a filterable list.
function runsPage() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const workflow = h("input", { type: "text", name: "workflow", value: params.get("workflow") || "" });
  const state = h("select", { name: "status" }, ["", "running", "finishing", "success", "failure", "cancelled", "timed_out"]
    .map((s) => h("option", s === (params.get("status") || "") ? { value: s, selected: "" } : { value: s }, s || "any")));
  const since = h("input", { type: "text", name: "since", placeholder: "1h", value: params.get("since") || "" });
  const list = h("div", {}, "Loading…");
  const load = async () => {
    const q = new URLSearchParams();
    if (workflow.value) q.set("workflow", workflow.value);
    if (state.value) q.set("status", state.value);
    if (since.value) q.set("since", since.value);
    try { list.replaceChildren(table(runHeaders, runRows(await api("GET", "/api/runs?" + q)))); }
    catch (e) { list.replaceChildren(h("p", { class: "error" }, e.message)); }
  };
  main.replaceChildren(h("h1", {}, "Runs"),
    h("form", { onsubmit: (ev) => { ev.preventDefault(); load(); } },
      "Workflow ", workflow, " Status ", state, " Since ", since, " ", h("button", { type: "submit" }, "Filter")), list);
  load();
}

// Schedules & triggers: each schedule with its next fire times in its zone, each trigger
// with its source, lag and dead letters, webhooks with their URL; refreshed every few seconds.
function schedulesPage() {
  const schedules = h("div", { id: "schedules" }, "Loading…");
  const triggers = h("div", { id: "triggers" }, "Loading…");
  main.replaceChildren(h("h1", {}, "Schedules & triggers"), h("h2", {}, "Schedules"), schedules,
    h("h2", {}, "Triggers"), triggers);
  const wf = (name) => h("a", { href: "#/workflow/" + encodeURIComponent(name) }, name);
  const load = async () => {
    const list = await api("GET", "/api/schedules");
    schedules.replaceChildren(list.length === 0 ? h("p", {}, "No schedules.") :
      table(["Workflow", "Schedule", "When", "Overlap", "State", "Next (its zone)", "Last run", "Started"],
        list.map((s) => h("tr", { "data-schedule": s.workflow + "/" + s.name },
          h("td", {}, wf(s.workflow)), h("td", {}, s.name), h("td", {}, s.when), h("td", {}, s.overlap),
          h("td", { class: "schedule-state" }, s.paused ? "paused" : "active", s.note ? [" · ", h("q", {}, s.note)] : null),
          h("td", {}, (s.next_local || []).map((t) => h("div", {}, t))),
          h("td", {}, s.last_run ? h("a", { href: "#/run/" + encodeURIComponent(s.last_run) }, s.last_run) : "-"),
          h("td", {}, s.counts ? String(s.counts.started) : "-")))));
    const found = await api("GET", "/api/triggers");
    triggers.replaceChildren(found.length === 0 ? h("p", {}, "No triggers.") :
      table(["Workflow", "Trigger", "Kind", "Source", "Lag", "In hand", "Dead letters"],
        found.map((t) => h("tr", { "data-trigger": t.workflow + "/" + t.name },
          h("td", {}, wf(t.workflow)), h("td", {}, t.name), h("td", {}, t.kind + (t.scheme ? " (" + t.scheme + ")" : "")),
          h("td", {}, t.url ? h("code", { class: "hook-url" }, location.origin + t.url) : t.source),
          h("td", {}, t.lag === undefined ? (t.error ? h("span", { class: "error" }, t.error) : "-") : String(t.lag)),
          h("td", {}, t.in_hand === undefined ? "-" : String(t.in_hand)),
          h("td", {}, String(t.dead_letters))))));
  };
  load().catch(failed);
  const timer = setInterval(() => load().catch(failed), 5000);
  stop = () => clearInterval(timer);
}

function route() {
  stop();
  stop = () => {};
  const [path] = location.hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "workflow" && parts[1]) workflowPage(parts[1]).catch(failed);
  else if (parts[0] === "run" && parts[1]) runPage(parts[1]);
  else if (parts[0] === "runs") runsPage();
  else if (parts[0] === "schedules") schedulesPage();
  else meshPage();
}
window.addEventListener("hashchange", route);
route();
