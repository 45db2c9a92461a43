// The status page: polls the JSON API and renders the job list or one job
// (location.hash "#job=ID"). No framework, no build step.
"use strict";

const poll = 2000;
let graph = null, graphKey = "", timer = null;

const $ = (id) => document.getElementById(id);
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}
function td(text, cls) { return el("td", { class: cls || "", text: text == null ? "" : String(text) }); }
const fmtNum = (n) => (n == null || n < 0) ? "–" : n.toLocaleString("en");
const fmtRate = (r) => (r == null || r < 0) ? "–" : r.toFixed(1);
function fmtBytes(n) {
  if (n == null || n < 0) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
// Watermarks are Unix milliseconds; Beam's minimum and maximum show as such.
function fmtWatermark(t) {
  if (!t.has_watermark) return "–";
  if (t.watermark >= 9223371950454775) return "+∞ (done)";
  if (t.watermark <= -9223371950454775) return "−∞";
  return new Date(t.watermark).toISOString().replace("T", " ").replace("Z", " UTC");
}

async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store" });
  if (!r.ok) throw new Error(url + ": " + r.status + " " + (await r.text()));
  return r.json();
}

function jobID() { const m = location.hash.match(/^#job=(.+)$/); return m ? decodeURIComponent(m[1]) : ""; }

async function refresh() {
  clearTimeout(timer);
  try {
    const id = jobID();
    $("jobs-view").hidden = !!id; $("job-view").hidden = !id;
    if (id) renderJob(await getJSON("api/jobs/" + encodeURIComponent(id)));
    else renderJobs(await getJSON("api/jobs"));
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("updated").textContent = "error: " + e.message;
  }
  timer = setTimeout(refresh, poll);
}

function renderJobs(jobs) {
  const body = $("jobs").tBodies[0];
  body.replaceChildren(...jobs.map((j) => el("tr", { "data-job": j.id },
    el("td", {}, el("a", { href: "#job=" + encodeURIComponent(j.id), text: j.id })),
    td(j.name), td(j.application_id), el("td", {}, el("span", { class: "state " + j.state, text: stateText(j) })),
    td(new Date(j.started_at).toLocaleString()))));
  $("no-jobs").hidden = jobs.length > 0;
  if (jobs.length) $("process").textContent = jobs[0].process;
}

function renderJob(j) {
  $("job-title").textContent = j.name + " (" + j.id + ")";
  const st = $("job-state"); st.textContent = stateText(j); st.className = "state " + j.state;
  $("process").textContent = j.process + (j.instance ? ", instance " + j.instance : "");
  $("job-facts").textContent = "application " + j.application_id + " · started " + new Date(j.started_at).toLocaleString() +
    " · this instance: " + fmtNum(j.commits) + " commits, " + fmtNum(j.aborts) + " aborts";
  setButton($("cancel"), j.can_cancel, j.cancel_unavailable);
  setButton($("drain"), j.can_drain, j.drain_unavailable);
  renderGraph(j);
  $("cluster-error").hidden = !j.cluster_error;
  $("cluster-error").textContent = j.cluster_error ? "Kafka's view of the application: " + j.cluster_error : "";
  $("tasks").tBodies[0].replaceChildren(...j.tasks.map((t) => {
    const i = t.instance;
    const owner = t.owner ? t.owner + (t.local ? " (this process)" : "") : "–";
    return el("tr", { class: t.local ? "local" : "", "data-task": t.sub_topology + "/" + t.partition },
      td(t.sub_topology + "/" + t.partition), td(t.topic + (t.source ? " (source)" : "")), td(owner),
      td(fmtWatermark(t)), td(fmtNum(t.lag), "num"), td(fmtRate(t.rate_per_sec), "num"),
      td(i ? fmtNum(i.records_in) : "–", "num"), td(i ? fmtNum(i.records_out) : "–", "num"),
      td(i ? fmtBytes(i.state_bytes) : "–", "num"), td(i ? fmtNum(i.restores) + " (" + fmtNum(i.restored_records) + " records)" : "–", "num"));
  }));
  const vals = (v) => v == null ? "–" : (v.length === 4 ? "count " + v[0] + ", sum " + v[1] + ", min " + v[2] + ", max " + v[3] : String(v[0]));
  $("metrics").tBodies[0].replaceChildren(...j.metrics.map((m) =>
    el("tr", {}, td(m.transform), td(m.namespace), td(m.name), td(m.kind), td(vals(m.attempted), "num"), td(vals(m.committed), "num"))));
  $("messages").tBodies[0].replaceChildren(...j.messages.slice().reverse().map((m) =>
    el("tr", { class: m.importance }, td(new Date(m.time).toLocaleTimeString()), td(m.importance), td(m.text, "msg"))));
}

// A drained job ends DONE (what SDK clients take as success); the page
// says it was drained.
function stateText(j) {
  return j.drained ? j.state + " (drained)" : j.state;
}

function setButton(b, enabled, reason) {
  b.disabled = !enabled;
  b.title = enabled ? "" : (reason || "");
}

// The graph is laid out once per topology; later polls only relabel it.
function renderGraph(j) {
  const top = j.topology || { nodes: [], edges: [] };
  const wm = {};
  for (const t of j.tasks) {
    const k = "st-" + t.sub_topology;
    if (!t.has_watermark) { wm[k] = wm[k] || null; continue; }
    wm[k] = (wm[k] == null) ? t.watermark : Math.min(wm[k], t.watermark);
  }
  const label = (n) => n.kind !== "subtopology" ? n.label :
    n.label + (wm[n.id] != null ? "\nwatermark " + fmtWatermark({ has_watermark: true, watermark: wm[n.id] }) : "");
  const key = j.id + JSON.stringify(top);
  if (graph && graphKey === key) {
    for (const n of top.nodes) graph.getElementById(n.id).data("label", label(n));
    return;
  }
  graphKey = key;
  if (graph) graph.destroy();
  const elements = top.nodes.map((n) => ({ data: { id: n.id, label: label(n), kind: n.kind } }))
    .concat(top.edges.map((e, i) => ({ data: { id: "e" + i, source: e.from, target: e.to, label: e.topic, side: e.side ? "yes" : "no" } })));
  graph = cytoscape({
    container: $("graph"), elements, wheelSensitivity: 0.3,
    layout: { name: "dagre", rankDir: "TB", nodeSep: 40, rankSep: 45 }, maxZoom: 1.5,
    style: [
      { selector: "node", style: { "shape": "round-rectangle", "label": "data(label)", "text-wrap": "wrap", "text-valign": "center",
        "font-size": 12, "width": "label", "height": "label", "padding": "8px", "background-color": "#e3f2fd", "border-width": 1, "border-color": "#1565c0" } },
      { selector: "node[kind = 'kafka']", style: { "shape": "barrel", "background-color": "#fff3e0", "border-color": "#ef6c00" } },
      { selector: "edge", style: { "curve-style": "bezier", "target-arrow-shape": "triangle", "width": 1.5, "label": "data(label)",
        "font-size": 10, "text-rotation": "none", "text-background-color": "#fff", "text-background-opacity": 1, "color": "#555", "line-color": "#90a4ae", "target-arrow-color": "#90a4ae" } },
      { selector: "edge[side = 'yes']", style: { "line-style": "dashed" } },
    ],
  });
  window.ksGraph = graph; // for tests and the console
}

async function act(what) {
  const id = jobID();
  $("action-result").textContent = what + "…";
  try {
    const r = await fetch("api/jobs/" + encodeURIComponent(id) + "/" + what, { method: "POST", headers: { "X-Ksrunner-Action": what } });
    const body = await r.json();
    $("action-result").textContent = r.ok ? what + " requested" : what + " failed: " + body.error;
  } catch (e) {
    $("action-result").textContent = what + " failed: " + e.message;
  }
  refresh();
}

$("cancel").addEventListener("click", () => act("cancel"));
$("drain").addEventListener("click", () => act("drain"));
window.addEventListener("hashchange", () => { graphKey = ""; refresh(); });
refresh();
