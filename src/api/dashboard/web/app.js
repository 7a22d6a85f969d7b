"use strict";
const $ = id => document.getElementById(id);
const VIEWS = ["overview", "cards", "utilization", "groups", "jobs", "queues", "events", "whatif"];
const RANGES = { "15m": 900e3, "1h": 3600e3, "6h": 6 * 3600e3, "24h": 24 * 3600e3, "7d": 7 * 24 * 3600e3, "30d": 30 * 24 * 3600e3 };
const FILTERS = ["state", "queue", "group", "identity"];
// Quantities arrive in integer thousandths (milli-GPU, milli-CPU): shown with up to 3 decimals.
const milli = m => (m === null || m === undefined) ? "none" : (m / 1000).toFixed(3).replace(/\.?0+$/, "");
const gib = mib => (mib / 1024).toFixed(mib % 1024 ? 1 : 0) + " GiB";
const pad = n => String(n).padStart(2, "0");
const hhmm = ms => { const d = new Date(ms); return pad(d.getHours()) + ":" + pad(d.getMinutes()); };
const stamp = ms => { const d = new Date(ms);
  return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + hhmm(ms) + ":" + pad(d.getSeconds()); };

// --- the token and the view's state (the URL fragment) -------------------------------------
let token = "";
let me = null;  // /v1/whoami
const ui = { view: "overview", range: "1h", kind: "", job: "", state: "", queue: "", group: "", identity: "" };
function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  if (p.get("token")) {
    token = p.get("token");
    try { localStorage.setItem("tessera-token", token); } catch (e) {}
    p.delete("token");  // a link to the view should not carry the secret
    history.replaceState(null, "", location.pathname + (p.toString() ? "#" + p.toString() : ""));
  }
  for (const k of Object.keys(ui)) ui[k] = p.get(k) || "";
  if (!VIEWS.includes(ui.view)) ui.view = "overview";
  if (!RANGES[ui.range]) ui.range = "1h";
}
function writeHash() {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(ui)) {
    if (v && !(k === "view" && v === "overview") && !(k === "range" && v === "1h")) p.set(k, v);
  }
  history.replaceState(null, "", location.pathname + (p.toString() ? "#" + p.toString() : ""));
}
readHash();
if (!token) { try { token = localStorage.getItem("tessera-token") || ""; } catch (e) {} }

// --- calls ---------------------------------------------------------------------------------
class ApiError extends Error { constructor(path, status, text) { super(path + ": " + status + " " + text); this.status = status; } }
async function api(path) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + token } });
  if (!r.ok) throw new ApiError(path, r.status, (await r.text()).slice(0, 300));
  return r.json();
}
const errors = new Map();  // what failed, shown until it works again
function showErrors() { $("error").textContent = [...errors.values()].join("; "); }
async function load(name, path) {
  try { const v = await api(path); errors.delete(name); return v; }
  catch (err) { errors.set(name, String(err.message || err)); return null; }
}

// --- small DOM helpers ---------------------------------------------------------------------
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = v; else if (k === "style") e.style.cssText = v; else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function cell(row, text, cls) { const td = row.insertCell(); td.textContent = text; if (cls) td.className = cls; return td; }
function tbody(id) { const b = $(id).tBodies[0]; b.textContent = ""; return b; }
// A stable colour per group name (a hash of the name picks the hue).
function colour(name) {
  let h = 0;
  for (const ch of String(name || "")) h = (h * 31 + ch.codePointAt(0)) >>> 0;
  return name ? "hsl(" + (h % 360) + ", 62%, 44%)" : "hsl(0, 0%, 50%)";
}
function legend(id, names) {
  const l = $(id);
  l.textContent = "";
  for (const n of names) l.append(el("span", { "data-group": n, style: "--c:" + colour(n), text: n }));
}

// --- views ---------------------------------------------------------------------------------
let data = { summary: null, nodes: null, groups: null, queues: null, jobs: null, events: null };
function showView() {
  for (const v of VIEWS) $("view-" + v).hidden = v !== ui.view;
  for (const a of document.querySelectorAll("nav a")) {
    if (a.dataset.view === ui.view) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  for (const b of document.querySelectorAll("[data-range]")) b.setAttribute("aria-pressed", String(b.dataset.range === ui.range));
  if (ui.view === "whatif" && !whatifLoaded && me) runWhatIf();
}

function renderOverview(sum) {
  const c = sum.cluster;
  let held_idle = 0, workers = 0, pending = 0;
  for (const g of sum.groups) { held_idle += g.gpu_milli_held_idle || 0; workers += g.workers; pending += g.pending; }
  $("gpus-total").textContent = milli(c.gpu_milli_total);
  $("gpus-idle").textContent = milli(c.gpu_milli_idle);
  $("gpus-held-idle").textContent = milli(held_idle);
  $("cpus-total").textContent = milli(c.cpu_milli_total);
  $("cpus-idle").textContent = milli(c.cpu_milli_idle);
  $("nodes").textContent = c.nodes;
  $("workers").textContent = workers;
  $("pending").textContent = pending;
  const b = tbody("overview-groups");
  for (const g of sum.groups) {
    const row = b.insertRow();
    row.dataset.group = g.group;
    row.insertCell().append(el("span", { class: "legend inline" }, el("span", { style: "--c:" + colour(g.group), text: g.group })));
    cell(row, milli(g.gpu_milli_total), "num");
    cell(row, milli(g.gpu_milli_held_idle || 0), "num");
    cell(row, g.workers, "num");
    cell(row, g.pending, "num");
  }
}

// The card map: a bar per device; its segments are the device's partitions and holdings, each as
// wide as its memory (gpu_memory_mib / memory_mib of the device).
function segment(node, dev, h, part) {
  const mem = h ? h.gpu_memory_mib : (part ? partMemory(part.profile, dev) : 0);
  const pct = dev.memory_mib > 0 ? Math.max(0, Math.min(100, 100 * mem / dev.memory_mib)) : 0;
  const group = h ? (h.group || "") : "";
  const what = h ? [h.job, h.identity, group, h.form, part ? part.profile : h.partition, milli(h.gpu_milli) + " GPU", gib(h.gpu_memory_mib)]
                 : ["free partition", part.profile];
  const s = el("div", {
    class: "seg" + (h ? "" : " empty") + (h && h.idle ? " idle" : ""), style: "width:" + pct.toFixed(2) + "%;--c:" + colour(group),
    "data-node": node.name, "data-device": dev.index, "data-job": h ? h.job : null, "data-group": h ? group : null,
    "data-identity": h ? h.identity : null, "data-form": h ? h.form : null,
    "data-partition": part ? part.name : (h && h.partition ? h.partition : null), "data-profile": part ? part.profile : null,
    "data-idle": h && h.idle ? "true" : null, title: what.filter(x => x).join(" · ") + (h && h.idle ? " · held but idle" : ""),
    tabindex: "0" });
  if (h && h.idle) s.append(el("span", { class: "tag", text: "idle" }));  // first: still seen on a narrow segment
  s.append(el("span", { class: "label", text: h ? [h.job, group, part ? part.profile : ""].filter(x => x).join(" · ") : part.profile }));
  return s;
}
function partMemory(profile, dev) {  // "1g.10gb" -> 10 GB; AMD partitions: an equal share
  const m = /\.(\d+)gb/.exec(profile || "");
  if (m) return Math.min(dev.memory_mib, Number(m[1]) * 1024);
  return dev.memory_mib / Math.max(1, (dev.partitions || []).length);
}
function renderCards(nodes) {
  const groups = new Set();
  const root = $("cardmap");
  root.textContent = "";
  for (const n of nodes.nodes) {
    const box = el("div", { class: "node", "data-node": n.name, "data-state": n.state },
                   el("h3", { text: n.name + " — " + n.state + (n.simulated ? " (simulated)" : "") + " · " + n.devices.length + " devices" }));
    for (const d of n.devices) {
      const bar = el("div", { class: "bar", role: "list", "aria-label": "device " + d.index });
      const byPart = new Map();
      for (const h of d.holders) { if (h.partition) byPart.set(h.partition, h); if (h.group) groups.add(h.group); }
      const parts = (d.partitions || []).slice().sort((a, b) => a.start - b.start);
      for (const p of parts) bar.append(segment(n, d, byPart.get(p.name) || (p.job ? { job: p.job, form: "partition", gpu_memory_mib: partMemory(p.profile, d), gpu_milli: 0 } : null), p));
      for (const h of d.holders) if (!h.partition || !parts.some(p => p.name === h.partition)) bar.append(segment(n, d, h, null));
      const layout = d.mig ? "MIG" : (d.amd_mode || "");
      const t = d.telemetry;
      box.append(el("div", { class: "device", "data-node": n.name, "data-device": d.index, "data-model": d.model, "data-layout": layout || null },
        el("div", null, el("b", { text: "GPU " + d.index }), " ", d.model, el("br"), el("small", { class: "muted", text: layout + (d.draining ? " draining" : "") })),
        bar,
        el("div", { class: "info", text: milli(d.gpu_milli_used) + " GPU · " + gib(d.gpu_memory_mib_used) + " / " + gib(d.memory_mib) +
                                          (t && t.util_pct !== undefined ? " · " + t.util_pct + "% busy" : "") })));
    }
    root.append(box);
  }
  if (!nodes.nodes.length) root.append(el("p", { class: "note", text: "No nodes yet: start an agent." }));
  legend("legend", [...groups].sort());
}

// Utilization: stacked areas by group with a time axis (HH:MM) and a GPU axis; the capacity as a
// dashed line, the held-but-idle GPUs as a dotted one.
async function loadUtilization() {
  const range = RANGES[ui.range];
  const step = Math.max(1000, Math.ceil(range / 300 / 1000) * 1000);  // at most ~300 points
  const u = await load("utilization", "/v1/utilization?by=group&since=" + (Date.now() - range) + "&step=" + step);
  if (u) drawUtilization(u, range);
}
function drawUtilization(u, range) {
  const s = u.samples || [];
  const chart = $("util");
  chart.textContent = "";
  chart.setAttribute("data-points", s.length);
  chart.setAttribute("data-step", u.step_ms || 0);
  chart.setAttribute("data-first-time", s.length ? s[0].time_ms : "");
  const W = 1000, H = 300, L = 48, R = 12, T = 10, B = 28;
  const t1 = Date.now(), t0 = t1 - range;
  const groups = [...new Set(s.flatMap(x => Object.keys(x.by || {})))].sort();
  legend("util-legend", groups);
  let ymax = 1000;
  for (const x of s) ymax = Math.max(ymax, x.gpu_milli_total || 0, x.gpu_milli_allocated || 0);
  const ystep = Math.max(1, Math.ceil(ymax / 1000 / 5));
  ymax = Math.ceil(ymax / 1000 / ystep) * ystep * 1000;
  const X = t => L + (W - L - R) * (t - t0) / range, Y = v => H - B - (H - T - B) * v / ymax;
  for (let g = 0; g <= ymax; g += ystep * 1000) {
    chart.append(svg("line", { class: "axis", x1: L, x2: W - R, y1: Y(g), y2: Y(g) }));
    chart.append(svg("text", { x: L - 6, y: Y(g) + 4, "text-anchor": "end" }, milli(g)));
  }
  chart.append(svg("text", { x: 4, y: T + 4, transform: "rotate(90 4 " + (T + 4) + ")" }, "GPUs"));
  const tick = [60e3, 300e3, 600e3, 1800e3, 3600e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3, 24 * 3600e3].find(t => range / t <= 8) || 24 * 3600e3;
  for (let t = Math.ceil(t0 / tick) * tick; t <= t1; t += tick) {
    chart.append(svg("line", { class: "axis", x1: X(t), x2: X(t), y1: H - B, y2: H - B + 5 }));
    const label = tick >= 24 * 3600e3 ? (new Date(t).getMonth() + 1) + "/" + new Date(t).getDate() : hhmm(t);
    chart.append(svg("text", { x: X(t), y: H - 8, "text-anchor": "middle", "data-time": t }, label));
  }
  if (!s.length) {
    chart.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no samples in this range yet"));
    $("util-now").textContent = "";
    return;
  }
  // Each sample stands for [time, time + step): steps, so a single sample still shows.
  const step = u.step_ms || 1000;
  const base = s.map(() => 0);
  for (const g of groups) {
    const top = s.map((x, i) => base[i] + ((x.by && x.by[g] && x.by[g].gpu_milli) || 0));
    let d = "";
    s.forEach((x, i) => { d += (i ? "L" : "M") + X(x.time_ms).toFixed(1) + "," + Y(top[i]).toFixed(1) + "L" + X(x.time_ms + step).toFixed(1) + "," + Y(top[i]).toFixed(1); });
    for (let i = s.length - 1; i >= 0; --i) d += "L" + X(s[i].time_ms + step).toFixed(1) + "," + Y(base[i]).toFixed(1) + "L" + X(s[i].time_ms).toFixed(1) + "," + Y(base[i]).toFixed(1);
    const p = svg("path", { d: d + "Z", fill: colour(g), "fill-opacity": "0.75", "data-group": g });
    p.append(svg("title", {}, g));
    chart.append(p);
    top.forEach((v, i) => { base[i] = v; });
  }
  const line = (key, cls) => {
    let d = "";
    s.forEach((x, i) => { d += (i ? "L" : "M") + X(x.time_ms).toFixed(1) + "," + Y(x[key] || 0).toFixed(1) + "L" + X(x.time_ms + step).toFixed(1) + "," + Y(x[key] || 0).toFixed(1); });
    chart.append(svg("path", { d, class: cls, "data-series": key }));
  };
  line("gpu_milli_total", "cap");
  line("gpu_milli_held_idle", "idle");
  const last = s[s.length - 1];
  $("util-now").textContent = "latest (" + stamp(last.time_ms) + "): " + milli(last.gpu_milli_allocated) + " of " + milli(last.gpu_milli_total) +
      " GPUs allocated, " + milli(last.gpu_milli_held_idle || 0) + " held but idle, " + last.workers + " workers, " + last.pending +
      " pending · " + s.length + " points, one per " + Math.round(step / 1000) + " s. Dashed: capacity; dotted: held but idle.";
}

function renderGroups(groups, sum, jobs) {
  const bySum = new Map(sum ? sum.groups.map(g => [g.group, g]) : []);
  const b = tbody("groups");
  for (const g of groups.groups) {
    const s = bySum.get(g.name) || {};
    const row = b.insertRow();
    row.dataset.group = g.name;
    row.insertCell().append(el("span", { class: "legend inline" }, el("span", { style: "--c:" + colour(g.name), text: g.name })));
    cell(row, g.parent || "");
    cell(row, milli(g.reservation.gpu_milli), "num");
    cell(row, milli(g.limit.gpu_milli), "num");
    cell(row, milli(g.usage.gpu_milli), "num");
    cell(row, milli(Math.max(0, (g.usage.gpu_milli || 0) - (g.reservation.gpu_milli || 0))), "num");
    cell(row, milli(s.gpu_milli_held_idle || 0), "num");
    cell(row, typeof g.fair_share === "number" ? g.fair_share.toFixed(3) : "", "num");
    cell(row, milli(g.weight_milli), "num");
    cell(row, s.pending === undefined ? "" : s.pending, "num");
    const why = new Map();
    for (const j of (jobs ? jobs.jobs : [])) {
      if (j.group !== g.name || j.state !== "pending") continue;
      const r = j.wait ? j.wait.step + ": " + j.wait.reason : (j.reason || "");
      why.set(r, (why.get(r) || 0) + 1);
    }
    cell(row, [...why].map(([r, n]) => n + " × " + r).join("; "));
  }
}

function option(sel, value, label) { sel.append(el("option", { value, text: label })); }
function renderJobs(jobs) {
  const all = jobs.jobs;
  for (const f of FILTERS) {
    const sel = $("f-" + f);
    const values = new Set(all.map(j => j[f]).filter(v => v));
    if (ui[f]) values.add(ui[f]);
    sel.textContent = "";
    option(sel, "", "all");
    for (const v of [...values].sort()) option(sel, v, v);
    sel.value = ui[f];
  }
  const shown = all.filter(j => FILTERS.every(f => !ui[f] || j[f] === ui[f]));
  $("jobs-count").textContent = shown.length + " of " + all.length + " jobs";
  const b = tbody("jobs");
  for (const j of shown) {
    const row = b.insertRow();
    row.dataset.job = j.id;
    row.dataset.state = j.state;
    row.dataset.group = j.group;
    row.dataset.queue = j.queue;
    row.insertCell().append(el("button", { type: "button", class: "link", "data-open": j.id, "aria-expanded": String(ui.job === j.id), text: j.id }));
    cell(row, j.state, "state-" + j.state);
    cell(row, j.queue);
    cell(row, j.group);
    cell(row, j.identity);
    cell(row, j.placement ? j.placement.form : "");
    cell(row, j.placement ? j.placement.node : "");
    cell(row, j.activity ? (j.activity.idle ? "idle" : "active") : "");
    cell(row, j.wait ? j.wait.step + ": " + j.wait.reason : (j.reason || ""));
  }
  if (!shown.length) b.insertRow().insertCell().textContent = "no jobs match";
  if (ui.job) showJob(all.find(j => j.id === ui.job));
}
async function showJob(j) {
  const box = $("job-detail");
  if (!ui.job) { box.hidden = true; return; }
  const ev = await load("job-events", "/v1/events?subject=" + encodeURIComponent(ui.job) + "&limit=100");
  box.textContent = "";
  box.hidden = false;
  box.dataset.job = ui.job;
  box.append(el("h3", { text: "Job " + ui.job + (j ? " · " + j.state : "") }),
             el("button", { type: "button", "data-close": "1", text: "Close" }));
  if (j) {
    box.append(el("p", { "data-wait": "1", text: j.state === "pending" ? "Waiting at " + (j.wait ? j.wait.step + ": " + j.wait.reason : j.reason || "?")
                                           : "Reason: " + (j.reason || "none") }));
  }
  const t = el("table", { "data-events": ui.job }, el("thead", null, el("tr", null, el("th", { text: "time" }), el("th", { text: "kind" }),
                                                                   el("th", { text: "actor" }), el("th", { text: "reason" }))));
  const tb = t.createTBody();
  for (const e of (ev ? ev.events : [])) {
    const row = tb.insertRow();
    cell(row, stamp(e.time_ms)); cell(row, e.kind); cell(row, e.actor); cell(row, e.reason);
  }
  box.append(t);
}

function renderQueues(queues, jobs) {
  const count = (q, st) => jobs ? jobs.jobs.filter(j => j.queue === q && j.state === st).length : "";
  const b = tbody("queues");
  for (const q of queues.queues) {
    const row = b.insertRow();
    row.dataset.queue = q.name;
    cell(row, q.name); cell(row, q.groups.join(", ")); cell(row, q.class); cell(row, q.forms.join(", "));
    cell(row, q.priority, "num"); cell(row, q.preemptible ? "yes" : "no"); cell(row, q.profile);
    cell(row, q.gpus + (q.gpu_milli && q.gpu_milli < 1000 ? " × " + milli(q.gpu_milli) : ""), "num");
    cell(row, q.gpu_memory_mib ? gib(q.gpu_memory_mib) : "", "num"); cell(row, q.backend);
    cell(row, count(q.name, "pending"), "num"); cell(row, count(q.name, "running"), "num");
  }
}

function renderEvents(ev) {
  const b = tbody("events");
  for (const e of ev.events.slice().reverse()) {
    const row = b.insertRow();
    row.dataset.kind = e.kind;
    cell(row, stamp(e.time_ms)); cell(row, e.kind); cell(row, e.subject); cell(row, e.actor); cell(row, e.reason);
  }
  if (!ev.events.length) b.insertRow().insertCell().textContent = "no events" + (ui.kind ? " of kind " + ui.kind + "*" : "");
}

let whatifLoaded = false;
async function runWhatIf() {
  whatifLoaded = true;
  const note = $("whatif-note");
  if (me && me.role !== "admin") { note.textContent = "The what-if report is for admins."; return; }
  const since = Date.now() - RANGES[$("w-since").value];
  const forms = $("w-class").value.trim() + "=" + $("w-forms").value.trim();
  note.textContent = "replaying…";
  try {
    const w = await api("/v1/whatif?since=" + since + "&forms=" + encodeURIComponent(forms));
    errors.delete("whatif");
    note.textContent = w.jobs + " jobs replayed with " + forms + "; " + (w.returned || 0) + " cards returned.";
    const b = tbody("whatif");
    for (const [name, c] of Object.entries(w.classes || {})) {
      const row = b.insertRow();
      row.dataset.class = name;
      const sec = v => v === undefined || v === null ? "" : Number(v).toFixed(1) + " s";
      cell(row, name); cell(row, c.jobs, "num"); cell(row, c.observed_cards, "num"); cell(row, c.as_configured_cards, "num");
      cell(row, c.what_if_cards, "num"); cell(row, c.returned, "num"); cell(row, sec(c.observed_wait_p99_s), "num");
      cell(row, sec(c.as_configured_wait_p99_s), "num"); cell(row, sec(c.what_if_wait_p99_s), "num");
    }
  } catch (err) {
    if (err.status === 403) note.textContent = "The what-if report is for admins.";
    else { note.textContent = ""; errors.set("whatif", String(err.message || err)); }
  }
  showErrors();
}

// --- refresh -------------------------------------------------------------------------------
async function refresh() {
  if (!token) { $("login").hidden = false; return; }
  try {
    if (!me) {
      me = await load("whoami", "/v1/whoami");
      if (me) $("whoami").textContent = me.name + " (" + me.role + ")";
      if (me && ui.view === "whatif" && !whatifLoaded) runWhatIf();
    }
    const kind = ui.kind ? "&kind=" + encodeURIComponent(ui.kind) : "";
    const [sum, nodes, groups, queues, jobs, ev] = await Promise.all([
      load("summary", "/v1/summary"), load("nodes", "/v1/nodes"), load("groups", "/v1/groups"), load("queues", "/v1/queues"),
      load("jobs", "/v1/jobs?limit=500"), load("events", "/v1/events?tail=200" + kind), loadUtilization()]);
    data = { summary: sum, nodes, groups, queues, jobs, events: ev };
    if (sum) renderOverview(sum);
    if (nodes) renderCards(nodes);
    if (groups) renderGroups(groups, sum, jobs);
    if (jobs) renderJobs(jobs);
    if (queues) renderQueues(queues, jobs);
    if (ev) renderEvents(ev);
  } catch (err) {
    errors.set("page", String(err.message || err));
  }
  showErrors();
}
function rerender() {  // after a filter changes: from what is loaded
  writeHash();
  try { if (data.jobs) renderJobs(data.jobs); } catch (err) { errors.set("page", String(err.message || err)); showErrors(); }
}

$("login").addEventListener("submit", ev => {
  ev.preventDefault();
  token = $("token").value;
  try { localStorage.setItem("tessera-token", token); } catch (e) {}
  $("login").hidden = true;
  refresh();
});
window.addEventListener("hashchange", () => { readHash(); $("f-kind").value = ui.kind; showView(); refresh(); });
for (const f of FILTERS) $("f-" + f).addEventListener("change", ev => { ui[f] = ev.target.value; rerender(); });
$("f-kind").value = ui.kind;
$("f-kind").addEventListener("change", ev => { ui.kind = ev.target.value.trim(); writeHash(); refresh(); });
for (const b of document.querySelectorAll("[data-range]")) {
  b.addEventListener("click", () => { ui.range = b.dataset.range; writeHash(); showView(); loadUtilization().then(showErrors); });
}
$("jobs").addEventListener("click", ev => {
  const b = ev.target.closest("[data-open]");
  if (!b) return;
  ui.job = ui.job === b.dataset.open ? "" : b.dataset.open;
  rerender();
  if (ui.job) $("job-detail").focus();
});
$("job-detail").addEventListener("click", ev => { if (ev.target.closest("[data-close]")) { ui.job = ""; rerender(); } });
$("whatif-form").addEventListener("submit", ev => { ev.preventDefault(); runWhatIf(); });
window.addEventListener("unhandledrejection", ev => { errors.set("page", String(ev.reason && ev.reason.message || ev.reason)); showErrors(); ev.preventDefault(); });
showView();
refresh();
setInterval(refresh, 5000);
