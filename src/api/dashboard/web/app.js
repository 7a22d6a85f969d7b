"use strict";
// The dashboard's script, in sections: formatting, the token and the URL fragment, calls, DOM
// helpers, colours, then one section per view (overview, groups, jobs and a job's page, queues,
// events), and the refresh loop with its event handlers. The nodes views are in nodes.js, the
// utilization charts in charts.js and the what-if view in whatif.js, each loaded before this.
const $ = id => document.getElementById(id);
const VIEWS = ["overview", "nodes", "cards", "utilization", "groups", "jobs", "queues", "events", "whatif"];
const RANGES = { "15m": 900e3, "1h": 3600e3, "6h": 6 * 3600e3, "24h": 24 * 3600e3, "7d": 7 * 24 * 3600e3, "30d": 30 * 24 * 3600e3 };
const FILTERS = ["state", "queue", "group", "identity"];
const ENDED = new Set(["succeeded", "failed", "cancelled", "lost"]);
const JOBS_PER_PAGE = 50;

// --- formatting for people -------------------------------------------------------------------
// Quantities arrive in integer thousandths (milli-GPU, milli-CPU): shown with at most one decimal
// ("<0.1" for a sliver); memory in MiB: shown in GiB; times as "3 min ago" and durations.
const milli = m => {
  if (m === null || m === undefined) return "none";  // no limit, no reservation
  if (m > 0 && m < 50) return "<0.1";
  return String(Math.round(m / 100) / 10);
};
const gpus = milli, cpus = milli;
const gib = mib => {
  if (mib === null || mib === undefined) return "none";
  const g = mib / 1024;
  return (g > 0 && g < 0.05 ? "<0.1" : String(Math.round(g * 10) / 10)) + " GiB";
};
const pad = n => String(n).padStart(2, "0");
const hhmm = ms => { const d = new Date(ms); return pad(d.getHours()) + ":" + pad(d.getMinutes()); };
const stamp = ms => { const d = new Date(ms);
  return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + hhmm(ms) + ":" + pad(d.getSeconds()); };
function span(ms) {  // a duration: "45 s", "12 min", "3 h 05 min", "2 d 4 h"
  if (ms === null || ms === undefined || !(ms >= 0)) return "";
  const s = Math.round(ms / 1000);
  if (s < 60) return s + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + " min";
  const h = Math.floor(m / 60);
  if (h < 24) return h + " h " + pad(m % 60) + " min";
  return Math.floor(h / 24) + " d " + (h % 24) + " h";
}
function ago(ms) {  // a time: relative, the exact time in a tooltip (see when())
  if (!ms) return "";
  const d = Date.now() - ms;
  return Math.abs(d) < 5000 ? "just now" : d > 0 ? span(d) + " ago" : "in " + span(-d);
}
const byName = new Intl.Collator(undefined, { numeric: true }).compare;  // "node-2" before "node-10"; fast on 10,000
const plural = (n, one, many) => n + " " + (n === 1 ? one : many || one + "s");
function when(ms) { return ms ? el("time", { datetime: new Date(ms).toISOString(), title: stamp(ms), text: ago(ms) }) : ""; }

// --- the token and the view's state (the URL fragment) -------------------------------------
let token = "";
let me = null;  // /v1/whoami
const ui = { view: "overview", range: "1h", kind: "", job: "", state: "", queue: "", group: "", identity: "", q: "",
             sort: "", dir: "", page: "", node: "", npage: "", npp: "" };
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
// A failed call becomes an ApiError whose message is for people: the server's {"error": ...}
// text, never its raw JSON. A 401 (no, a wrong or an expired token) shows the sign-in box.
class ApiError extends Error { constructor(what, status, text) { super(what + ": " + text); this.status = status; } }
async function errorText(r) {
  const body = await r.text();
  try { const j = JSON.parse(body); if (j && typeof j.error === "string") return j.error; } catch (e) {}
  return (body || r.statusText || "HTTP " + r.status).slice(0, 300);
}
async function call(path, method, raw) {
  let r;
  try { r = await fetch(path, { method: method || "GET", headers: { Authorization: "Bearer " + token } }); }
  catch (err) { throw new ApiError(path.split("?")[0], 0, "the server cannot be reached"); }
  if (r.status === 401) { signIn(await errorText(r)); throw new ApiError(path.split("?")[0], 401, "sign in again"); }
  if (!r.ok) throw new ApiError(path.split("?")[0], r.status, await errorText(r));
  return raw ? r : r.json();
}
const api = path => call(path);
const errors = new Map();  // what failed, shown until it works again
let signedOut = false;
function showErrors() { $("error").textContent = signedOut ? "" : [...errors.values()].join("; "); }
async function load(name, path) {
  try { const v = await api(path); errors.delete(name); return v; }
  catch (err) { errors.set(name, String(err.message || err)); return null; }
}
function signIn(why) {
  signedOut = true;
  me = null;
  $("login").hidden = false;
  document.querySelector("main").hidden = true;
  $("login-why").textContent = why === undefined ? "Enter your API token to see the cluster."
      : "Your token was not accepted (" + why + "): it may be wrong or expired. Enter a valid API token.";
  $("whoami").textContent = "";
  showErrors();
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
function cell(row, text, cls) { const td = row.insertCell(); td.append(text === undefined || text === null ? "" : text); if (cls) td.className = cls; return td; }
function tbody(id) { const b = $(id).tBodies[0]; b.textContent = ""; return b; }
// A pager: "‹ previous", "page N of M", "next ›"; `go(page)` is called with the page chosen.
function pager(id, page, pages, go) {
  const nav = $(id);
  nav.textContent = "";
  nav.dataset.page = page;
  nav.dataset.pages = pages;
  if (pages <= 1) return;
  const b = (text, to, label) => {
    const x = el("button", { type: "button", text, "aria-label": label, disabled: to < 1 || to > pages || to === page });
    x.addEventListener("click", () => go(to));
    return x;
  };
  nav.append(b("‹ previous", page - 1, "previous page"), el("span", { text: " page " + page + " of " + pages + " " }),
             b("next ›", page + 1, "next page"));
}

// --- colours: a distinct, colour-blind-safe colour per group ---------------------------------
// Okabe & Ito's colours (less black) first, then Paul Tol's muted set. A group's colour is picked
// by a hash of its name among the first seven; when two groups on the page hash to one colour,
// the one later in name order takes the next free one (the extended set only once all seven are
// taken), so every group keeps one distinct colour on every view, whichever page it is drawn on.
const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
                 "#332288", "#44AA99", "#882255", "#999933", "#AA4499", "#117733", "#88CCEE", "#DDCC77", "#CC6677"];
const PRIMARY = 7;
const knownGroups = new Set();
let colourOf = new Map();
function hashOf(name) { let h = 7; for (const ch of String(name)) h = (h * 31 + ch.codePointAt(0)) >>> 0; return h; }
function learnGroups(names) {
  let grew = false;
  for (const n of names) if (n && !knownGroups.has(n)) { knownGroups.add(n); grew = true; }
  if (!grew) return;
  colourOf = new Map();
  const taken = new Set();
  for (const n of [...knownGroups].sort()) {
    let slot = hashOf(n) % PRIMARY;
    for (let i = 0; i < PRIMARY && taken.has(slot); ++i) slot = (slot + 1) % PRIMARY;
    for (let i = PRIMARY; i < PALETTE.length && taken.has(slot); ++i) slot = i;
    if (taken.has(slot)) slot = hashOf(n) % PALETTE.length;  // past 16 groups colours repeat
    taken.add(slot);
    colourOf.set(n, PALETTE[slot]);
  }
}
function colour(name) {
  if (!name) return "#8a8f98";
  if (!colourOf.has(name)) learnGroups([name]);
  return colourOf.get(name);
}
function legend(id, names) {
  const l = $(id);
  l.textContent = "";
  for (const n of names) l.append(el("span", { "data-group": n, "data-colour": colour(n), style: "--c:" + colour(n), text: n }));
}
function swatch(group) {
  return el("span", { class: "legend inline" }, el("span", { "data-group": group, "data-colour": colour(group), style: "--c:" + colour(group), text: group }));
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

// The overview: tiles, GPUs held over the last hour, recent events, and per group what it holds
// against its reservation and limit (GPUs, CPUs, memory).
function renderOverview(sum, groups, nodes) {
  const c = sum.cluster;
  let held_idle = 0, workers = 0, pending = 0, mem_held = 0;
  for (const g of sum.groups) { held_idle += g.gpu_milli_held_idle || 0; workers += g.workers; pending += g.pending; mem_held += g.memory_mib_total || 0; }
  $("gpus-total").textContent = gpus(c.gpu_milli_total);
  $("gpus-idle").textContent = gpus(c.gpu_milli_idle);
  // Cards that take no work (cordoned, drained, unhealthy) are neither idle nor held.
  $("gpus-held").textContent =
    gpus(Math.max(0, c.gpu_milli_total - c.gpu_milli_idle - (c.gpu_milli_unavailable || 0)));
  $("gpus-held-idle").textContent = gpus(held_idle);
  $("cpus-total").textContent = cpus(c.cpu_milli_total);
  $("cpus-idle").textContent = cpus(c.cpu_milli_idle);
  const ready = nodes ? nodes.nodes.filter(n => n.state === "ready") : [];
  $("mem-total").textContent = nodes ? gib(ready.reduce((t, n) => t + (n.memory_mib || 0), 0)) : "-";
  $("mem-held").textContent = gib(mem_held);
  $("nodes").textContent = c.nodes;
  $("workers").textContent = workers;
  $("pending").textContent = pending;
  const conf = new Map(groups ? groups.groups.map(g => [g.name, g]) : []);
  const b = tbody("overview-groups"), quota = tbody("overview-quota");
  for (const g of sum.groups) {
    const row = b.insertRow();
    row.dataset.group = g.group;
    row.insertCell().append(swatch(g.group));
    cell(row, gpus(g.gpu_milli_total), "num");
    cell(row, gpus(g.gpu_milli_held_idle || 0), "num" + (g.gpu_milli_held_idle ? " warn" : ""));
    cell(row, g.workers, "num");
    cell(row, g.pending, "num");
    const q = conf.get(g.group) || { reservation: {}, limit: {} };
    const res = v => v ? v : null;  // a reservation of 0: none
    const r = quota.insertRow();
    r.dataset.group = g.group;
    r.insertCell().append(swatch(g.group));
    cell(r, gpus(g.gpu_milli_total), "num");
    cell(r, gpus(res(g.gpu_milli_reservation)), "num");
    cell(r, gpus(g.gpu_milli_limit), "num");
    cell(r, cpus(g.cpu_milli_total), "num");
    cell(r, cpus(res(q.reservation.cpu_milli)), "num");
    cell(r, cpus(q.limit.cpu_milli), "num");
    cell(r, gib(g.memory_mib_total), "num");
    cell(r, gib(res(q.reservation.memory_mib)), "num");
    cell(r, gib(q.limit.memory_mib), "num");
  }
}
function renderRecentEvents(ev) {
  const ul = $("ov-events");
  ul.textContent = "";
  for (const e of ev.events.slice(-10).reverse()) {
    ul.append(el("li", { "data-kind": e.kind }, when(e.time_ms), " ", el("b", { text: e.kind }), " ",
                 e.kind.startsWith("job.") ? el("a", { href: "#view=jobs&job=" + encodeURIComponent(e.subject), text: e.subject }) : e.subject,
                 e.reason ? el("span", { class: "muted", text: " — " + humanTimes(e.reason) }) : ""));
  }
  if (!ev.events.length) ul.append(el("li", { class: "muted", text: "no events yet" }));
}

// The nodes views (heat map, card map, node actions) are in nodes.js; the utilization charts in
// charts.js.

function renderGroups(groups, sum, jobs) {
  const bySum = new Map(sum ? sum.groups.map(g => [g.group, g]) : []);
  const b = tbody("groups");
  for (const g of groups.groups) {
    const s = bySum.get(g.name) || {};
    const row = b.insertRow();
    row.dataset.group = g.name;
    row.insertCell().append(swatch(g.name));
    cell(row, g.parent || "");
    cell(row, milli(g.reservation.gpu_milli), "num");
    cell(row, milli(g.limit.gpu_milli), "num");
    cell(row, milli(g.usage.gpu_milli), "num");
    cell(row, milli(Math.max(0, (g.usage.gpu_milli || 0) - (g.reservation.gpu_milli || 0))), "num");
    cell(row, milli(s.gpu_milli_held_idle || 0), "num");
    cell(row, typeof g.fair_share === "number" ? (g.fair_share > 0 && g.fair_share < 0.01 ? "<0.01" : String(Math.round(g.fair_share * 100) / 100)) : "", "num");
    cell(row, milli(g.weight_milli), "num");
    cell(row, s.pending === undefined ? "" : s.pending, "num");
    const why = new Map();
    for (const j of (jobs ? jobs.jobs : [])) {
      if (j.group !== g.name || j.state !== "pending") continue;
      const r = jobReason(j);
      why.set(r, (why.get(r) || 0) + 1);
    }
    cell(row, [...why].map(([r, n]) => n + " × " + r).join("; "));
  }
  // Quota per GPU model: one row per group and model it has a quota on or holds.
  const m = tbody("group-models");
  for (const g of groups.groups) {
    for (const q of g.models || []) {
      const row = m.insertRow();
      row.dataset.group = g.name;
      row.dataset.model = q.model;
      row.insertCell().append(swatch(g.name));
      cell(row, q.model);
      cell(row, milli(q.gpu_milli_usage), "num");
      cell(row, milli(q.gpu_milli_reservation), "num");
      cell(row, milli(q.gpu_milli_limit), "num");
    }
  }
  $("group-models-part").hidden = m.rows.length === 0;
}

// Jobs: filtered (state, group, queue, user, a search), sorted by a column (ui.sort, ui.dir) and
// paged (JOBS_PER_PAGE a page), all in the URL fragment. When each job started comes from its
// job.running events (the job's JSON has no start time).
let started = new Map();  // job id -> time of its latest job.running event
function option(sel, value, label) { sel.append(el("option", { value, text: label })); }
const jobName = j => (j.spec && j.spec.name) || "";
const jobGpus = j => j.placement ? (j.placement.gpu_milli || 0) : j.spec ? (j.spec.gpus || 0) * (j.spec.gpu_milli || 1000) : 0;
const jobForm = j => j.placement ? j.placement.form : "";
// When it started and ended: the job's start_ms and end_ms where the server sends them, else its
// latest job.running event and, once ended, its last update.
const jobStart = j => j.start_ms || started.get(j.id);
function jobDuration(j) {
  const t = jobStart(j);
  if (!t) return null;
  return (ENDED.has(j.state) ? j.end_ms || j.update_ms : Date.now()) - t;
}
// A waiting job's forecast (the simulator's): "expected to start in 12 min (3rd in line)".
function forecastText(j) {
  const f = j.state === "pending" && j.forecast;
  if (!f) return "";
  const at = f.expected_start_ms;
  const t = at ? (at - Date.now() < 5000 ? "expected to start now" : "expected to start in " + span(at - Date.now())) : "no start expected yet";
  return t + (f.position ? " (" + ordinal(f.position) + " in line)" : "");
}
// The scheduler's reasons give times in epoch seconds ("expected free at t=1796242375s", "grace
// until t=...", "since t=..."): each shown as a time for people ("at 14:32 (in 59 min)"), as the
// CLI does. Smaller values are a simulation's seconds, not times, and stay as they are.
const humanTimes = text => String(text || "").replace(/\bt=(\d{1,15})s\b/g, (m, s) => Number(s) < 1e9 ? m : hhmm(s * 1000) + " (" + ago(s * 1000) + ")");
// Why a job is where it is: the step it waits at and the reason, else the reason it ended.
const jobReason = j => humanTimes(j.wait ? j.wait.step + ": " + j.wait.reason : j.reason || "");
function ordinal(n) { const t = n % 100, o = n % 10; return n + (t >= 11 && t <= 13 ? "th" : o === 1 ? "st" : o === 2 ? "nd" : o === 3 ? "rd" : "th"); }
const SORTS = {
  name: j => (jobName(j) || j.id).toLowerCase(), identity: j => j.identity, group: j => j.group, queue: j => j.queue,
  form: jobForm, gpus: jobGpus, submitted: j => j.submit_ms, started: j => jobStart(j) || 0,
  duration: j => jobDuration(j) || 0, state: j => j.state,
};
function jobIdNumber(id) { const m = /(\d+)$/.exec(id); return m ? Number(m[1]) : 0; }
function sortJobs(list) {
  const key = SORTS[ui.sort] || SORTS.submitted;
  const dir = ui.dir === "asc" ? 1 : ui.dir === "desc" ? -1 : (SORTS[ui.sort] && ui.sort !== "submitted" && ui.sort !== "started" ? 1 : -1);
  return list.map(j => [key(j), j]).sort((a, b) => {
    const x = a[0], y = b[0];
    const c = typeof x === "number" && typeof y === "number" ? x - y : byName(String(x), String(y));
    return dir * (c || jobIdNumber(a[1].id) - jobIdNumber(b[1].id));
  }).map(p => p[1]);
}
function sortDir() {
  if (ui.dir) return ui.dir;
  return !ui.sort || ui.sort === "submitted" || ui.sort === "started" ? "desc" : "asc";
}
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
  if (document.activeElement !== $("f-q")) $("f-q").value = ui.q;
  const q = ui.q.trim().toLowerCase();
  const shown = sortJobs(all.filter(j => FILTERS.every(f => !ui[f] || j[f] === ui[f]) &&
      (!q || [j.id, jobName(j), j.identity].some(x => x && x.toLowerCase().includes(q)))));
  const pages = Math.max(1, Math.ceil(shown.length / JOBS_PER_PAGE));
  const page = Math.min(Math.max(1, Number(ui.page) || 1), pages);
  $("jobs-count").textContent = shown.length + " of " + all.length + " jobs" +
      (pages > 1 ? " · showing " + ((page - 1) * JOBS_PER_PAGE + 1) + "–" + Math.min(page * JOBS_PER_PAGE, shown.length) : "");
  for (const th of $("jobs").tHead.rows[0].cells) {
    if (!th.dataset.sort) continue;
    const on = th.dataset.sort === (ui.sort || "submitted");
    th.setAttribute("aria-sort", on ? (sortDir() === "asc" ? "ascending" : "descending") : "none");
  }
  const b = tbody("jobs");
  for (const j of shown.slice((page - 1) * JOBS_PER_PAGE, page * JOBS_PER_PAGE)) {
    const row = b.insertRow();
    row.dataset.job = j.id;
    row.dataset.state = j.state;
    row.dataset.group = j.group;
    row.dataset.queue = j.queue;
    const name = jobName(j);
    row.insertCell().append(el("button", { type: "button", class: "link", "data-open": j.id, "aria-expanded": String(ui.job === j.id),
                                           text: name || j.id }), name ? el("small", { class: "muted", text: " " + j.id }) : "");
    cell(row, j.identity);
    cell(row, swatch(j.group));
    cell(row, j.queue);
    cell(row, jobForm(j));
    cell(row, gpus(jobGpus(j)), "num");
    cell(row, when(j.submit_ms));
    cell(row, when(jobStart(j)));
    cell(row, span(jobDuration(j)), "num");
    cell(row, j.state, "state-" + j.state);
    cell(row, j.placement ? j.placement.node : "");
    cell(row, j.activity && !ENDED.has(j.state) ? (j.activity.idle ? "idle" : "active") : "");
    const fc = forecastText(j);
    cell(row, jobReason(j) + (fc ? "; " + fc : ""));
  }
  if (!shown.length) b.insertRow().insertCell().textContent = "no jobs match";
  pager("jobs-pager", page, pages, to => { ui.page = String(to); rerender(); });
  if (ui.job) showJob(all.find(j => j.id === ui.job)); else $("job-detail").hidden = true;
}

// A job's page: what it runs, where, since when, its output's tail (refreshed while it runs), its
// events, and Cancel for its owner and admins while it has not ended.
function shellWord(w) { return /^[-\w.,/:=@%+]+$/.test(w) ? w : "'" + String(w).replace(/'/g, "'\\''") + "'"; }
let cancelAnswer = { job: "", text: "", bad: false };
async function loadOutput(id) {
  try {
    const head = await call("/v1/jobs/" + encodeURIComponent(id) + "/output?offset=0&length=0", "GET", true);
    const size = Number(head.headers.get("X-Output-Size") || 0);
    if (!size) return { text: "", size: 0 };
    const r = await call("/v1/jobs/" + encodeURIComponent(id) + "/output?offset=" + Math.max(0, size - 16384), "GET", true);
    return { text: await r.text(), size, cut: size > 16384 };
  } catch (err) { return { error: String(err.message || err) }; }
}
async function showJob(listed) {
  const box = $("job-detail");
  if (!ui.job) { box.hidden = true; return; }
  const id = ui.job;
  const [j, ev, out] = await Promise.all([listed ? Promise.resolve(listed) : load("job", "/v1/jobs/" + encodeURIComponent(id)),
      load("job-events", "/v1/events?subject=" + encodeURIComponent(id) + "&limit=100"), loadOutput(id)]);
  if (ui.job !== id) return;
  const keepFocus = box.contains(document.activeElement) ? document.activeElement.id : "";
  box.textContent = "";
  box.hidden = false;
  box.dataset.job = id;
  box.dataset.state = j ? j.state : "";
  const head = el("div", { class: "detail-head" }, el("h3", { text: (j && jobName(j) ? jobName(j) + " · " : "") + "job " + id }),
                  j ? el("span", { class: "badge state-" + j.state, "data-job-state": j.state, text: j.state }) : "");
  const mayCancel = j && !ENDED.has(j.state) && me && (me.role === "admin" || me.name === j.identity);
  if (mayCancel) head.append(el("button", { type: "button", id: "cancel-job", class: "danger", "data-cancel": id, text: "Cancel job…" }));
  head.append(el("button", { type: "button", "data-close": "1", text: "Close" }));
  box.append(head);
  if (cancelAnswer.job === id && cancelAnswer.text) box.append(el("p", { id: "cancel-answer", role: "status", class: cancelAnswer.bad ? "bad" : "", text: cancelAnswer.text }));
  if (j) {
    const dl = el("dl", { class: "facts" });
    const fact = (k, v) => { if (v !== "" && v !== null && v !== undefined) dl.append(el("dt", { text: k }), el("dd", null, v)); };
    fact("user", j.identity); fact("group", swatch(j.group)); fact("queue", j.queue);
    fact("GPUs", gpus(jobGpus(j)) + (j.placement ? " · " + j.placement.form + " on " + j.placement.node +
         (j.placement.devices || []).map(d => " GPU " + d.index + (d.partition ? " (" + d.partition + ")" : "")).join(",") : ""));
    if (j.placement && j.placement.isolation) {
      const c = (j.placement.devices || []).map(d => d.compute).find(x => x);
      fact("isolation", el("span", { "data-isolation": "1", text: j.placement.isolation }));
      if (c) fact("compute", c.mode + (c.percent ? " " + c.percent + "%" : ""));
    }
    if (j.placement) fact("CPUs, memory", cpus(j.placement.cpu_milli) + " CPU · " + gib(j.placement.memory_mib) + " · GPU memory " + gib(j.placement.gpu_memory_mib));
    fact("submitted", when(j.submit_ms)); fact("started", when(jobStart(j) || (ev && (ev.events.filter(e => e.kind === "job.running").pop() || {}).time_ms)));
    fact(ENDED.has(j.state) ? "ran for" : "running for", span(jobDuration(j)));
    if (ENDED.has(j.state)) fact("ended", when(j.end_ms || j.update_ms));
    if (j.state === "pending" && j.forecast) fact("expected start", el("span", { "data-forecast": "1", text: forecastText(j) }));
    if (j.exit_code !== undefined && ENDED.has(j.state)) fact("exit code", String(j.exit_code));
    if (j.activity && !ENDED.has(j.state)) fact("activity", j.activity.idle ? "held but idle" : "active");
    box.append(dl);
    box.append(el("p", { "data-wait": "1", text: j.state === "pending" ? "Waiting at " + (jobReason(j) || "?") +
                                           (forecastText(j) ? "; " + forecastText(j) : "")
                                           : "Reason: " + (humanTimes(j.reason) || "none") }));
    if (j.spec && j.spec.command) box.append(el("h4", { text: "Command" }), el("pre", { class: "command", "data-command": "1", text: j.spec.command.map(shellWord).join(" ") }));
  }
  box.append(el("h4", { text: "Output" + (out.size ? " (" + (out.cut ? "last 16 KiB of " : "") + (out.size >= 1024 ? gib(out.size / 1024 / 1024).replace(" GiB", "") + " GiB" : out.size + " bytes") + ")" : "") +
                              (j && !ENDED.has(j.state) ? " · refreshed every 5 s" : "") }));
  box.append(el("pre", { class: "output", id: "job-output", tabindex: "0", "aria-label": "output of job " + id,
                         text: out.error ? "(" + out.error + ")" : out.text || "(no output yet)" }));
  const t = el("table", { "data-events": id }, el("caption", { text: "Events" }), el("thead", null, el("tr", null, el("th", { text: "time" }), el("th", { text: "kind" }),
                                                                   el("th", { text: "actor" }), el("th", { text: "reason" }))));
  const tb = t.createTBody();
  for (const e of (ev ? ev.events : [])) {
    const row = tb.insertRow();
    cell(row, when(e.time_ms)); cell(row, e.kind); cell(row, e.actor); cell(row, humanTimes(e.reason));
  }
  box.append(t);
  const o = $("job-output");
  o.scrollTop = o.scrollHeight;
  if (keepFocus && $(keepFocus)) $(keepFocus).focus();
}
function askToCancel(id) {
  const j = data.jobs && data.jobs.jobs.find(x => x.id === id);
  confirmWith("Cancel job " + (j && jobName(j) ? jobName(j) + " (" + id + ")" : id) + "? Its process is stopped; this cannot be undone.",
              "Cancel the job", "Keep it running", "cancel", id);
}
async function cancelJob(id) {
  cancelAnswer = { job: id, text: "cancelling…", bad: false };
  try {
    const j = await call("/v1/jobs/" + encodeURIComponent(id) + "/cancel", "POST");
    cancelAnswer = { job: id, bad: false, text: "The server accepted the cancel: the job is " + j.state + (j.reason ? " (" + j.reason + ")" : "") + "." };
  } catch (err) {
    cancelAnswer = { job: id, bad: true, text: "The server refused the cancel: " + String(err.message || err) };
  }
  refresh();
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
    cell(row, when(e.time_ms)); cell(row, e.kind); cell(row, e.subject); cell(row, e.actor); cell(row, humanTimes(e.reason));
  }
  if (!ev.events.length) b.insertRow().insertCell().textContent = "no events" + (ui.kind ? " of kind " + ui.kind + "*" : "");
}

// The what-if view: web/whatif.js.

// --- refresh -------------------------------------------------------------------------------
let refreshing = false, again = false;  // a refresh asked for during one runs right after it
async function refresh() {
  if (!token) { signIn(); return; }
  if (refreshing) { again = true; return; }
  refreshing = true;
  try {
    // Everything is asked for at once (who is signed in too); the jobs, and when each started,
    // only for the views that show them (thousands of jobs are the largest answer).
    const first = !me;
    const who = first ? load("whoami", "/v1/whoami") : null;
    const withJobs = ["jobs", "groups", "queues"].includes(ui.view);
    const kind = ui.kind ? "&kind=" + encodeURIComponent(ui.kind) : "";
    const all = Promise.all([
      load("summary", "/v1/summary"), load("nodes", "/v1/nodes").then(n => { if (n && ui.view === "nodes") renderHeat(n); return n; }), load("groups", "/v1/groups"), load("queues", "/v1/queues"),
      withJobs ? load("jobs", "/v1/jobs?limit=10000") : null, load("events", "/v1/events?tail=200" + kind),
      withJobs ? load("starts", "/v1/events?kind=job.running&tail=1000") : null, ui.kind ? load("recent", "/v1/events?tail=10") : null,
      ui.view === "utilization" ? loadUtilization() : null,
      ui.view === "overview" ? loadUtilization(RANGES["1h"], { chart: "ov-util", legend: "ov-util-legend" }) : null]);
    if (first) {
      me = await who;
      if (!me) return;
      signedOut = false;
      $("login").hidden = true;
      document.querySelector("main").hidden = false;
      $("whoami").textContent = "signed in as " + me.name + " (" + me.role + ")";
      $("whoami").append(" ", el("button", { type: "button", class: "link", id: "sign-out", text: "sign out" }));
      if (ui.view === "whatif" && !whatifLoaded) runWhatIf();
    }
    const [sum, nodes, groups, queues, fetched, ev, runs, recent] = await all;
    const jobs = fetched || data.jobs;  // not asked for: the last ones, not drawn again
    if (signedOut) return;
    if (groups) learnGroups(groups.groups.map(g => g.name));
    if (sum) learnGroups(sum.groups.map(g => g.group));
    if (runs) { started = new Map(); for (const e of runs.events) started.set(e.subject, e.time_ms); }
    data = { summary: sum, nodes, groups, queues, jobs, events: ev };
    if (sum) renderOverview(sum, groups, nodes);
    if (recent || ev) renderRecentEvents(recent || ev);
    if (nodes) renderCards(nodes);
    if (nodes && ui.view !== "nodes") renderHeat(nodes);
    if (groups) renderGroups(groups, sum, jobs);
    if (fetched) renderJobs(fetched);
    if (queues) renderQueues(queues, jobs);
    if (ev) renderEvents(ev);
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) errors.set("page", String(err.message || err));
  } finally {
    refreshing = false;
    showErrors();
    if (again) { again = false; setTimeout(refresh, 0); }
  }
}
function rerender() {  // after a filter changes: from what is loaded
  writeHash();
  try { if (data.jobs) renderJobs(data.jobs); } catch (err) { errors.set("page", String(err.message || err)); showErrors(); }
}

$("login").addEventListener("submit", ev => {
  ev.preventDefault();
  token = $("token").value.trim();
  try { localStorage.setItem("tessera-token", token); } catch (e) {}
  $("login-why").textContent = "checking…";
  me = null;
  refresh();
});
$("whoami").addEventListener("click", ev => {
  if (!ev.target.closest("#sign-out")) return;
  token = "";
  try { localStorage.removeItem("tessera-token"); } catch (e) {}
  signIn();
});
window.addEventListener("hashchange", () => { readHash(); $("f-kind").value = ui.kind; $("f-node").value = ui.node; showView();
  if (ui.view === "cards" && data.nodes) renderCards(data.nodes); refresh(); });
for (const f of FILTERS) $("f-" + f).addEventListener("change", ev => { ui[f] = ev.target.value; ui.page = ""; rerender(); });
$("f-q").addEventListener("input", ev => { ui.q = ev.target.value; ui.page = ""; rerender(); });
$("f-kind").value = ui.kind;
$("f-kind").addEventListener("change", ev => { ui.kind = ev.target.value.trim(); writeHash(); refresh(); });
$("f-node").value = ui.node;
$("f-node").addEventListener("input", ev => { ui.node = ev.target.value; ui.npage = ""; writeHash(); if (data.nodes) renderCards(data.nodes); });
$("f-npp").value = ui.npp || "10";
$("f-npp").addEventListener("change", ev => { ui.npp = ev.target.value === "10" ? "" : ev.target.value; ui.npage = ""; writeHash(); if (data.nodes) renderCards(data.nodes); });
for (const b of document.querySelectorAll("[data-range]")) {
  b.addEventListener("click", () => { ui.range = b.dataset.range; writeHash(); showView(); loadUtilization().then(showErrors); });
}
$("jobs").tHead.addEventListener("click", ev => {
  const th = ev.target.closest("th[data-sort]");
  if (!th) return;
  const k = th.dataset.sort;
  if ((ui.sort || "submitted") === k) ui.dir = sortDir() === "asc" ? "desc" : "asc";
  else { ui.sort = k; ui.dir = ""; }
  ui.page = "";
  rerender();
});
$("jobs").tBodies[0].addEventListener("click", ev => {
  const b = ev.target.closest("[data-open]");
  if (!b) return;
  ui.job = ui.job === b.dataset.open ? "" : b.dataset.open;
  rerender();
  if (ui.job) { $("job-detail").focus(); $("job-detail").scrollIntoView({ block: "start" }); }
});
$("job-detail").addEventListener("click", ev => {
  if (ev.target.closest("[data-close]")) { ui.job = ""; rerender(); return; }
  const c = ev.target.closest("[data-cancel]");
  if (c) askToCancel(c.dataset.cancel);
});
$("confirm").addEventListener("close", () => {
  if ($("confirm").returnValue !== "yes") return;
  const d = $("confirm").dataset;
  if (d.action === "cancel") cancelJob(d.subject); else nodeAction(d.subject, d.action);
});
$("cardmap").addEventListener("click", ev => {
  const b = ev.target.closest("[data-node-action]");
  if (!b) return;
  const node = b.dataset.node, a = b.dataset.nodeAction;
  if (a === "drain") {
    confirmWith("Drain node " + node + "? No new work goes there, and its running jobs are stopped and requeued.",
                "Drain the node", "Keep it as it is", "drain", node);
  } else {
    nodeAction(node, a);
  }
});
window.addEventListener("unhandledrejection", ev => { errors.set("page", String(ev.reason && ev.reason.message || ev.reason)); showErrors(); ev.preventDefault(); });
// Scrolling regions (wide tables, the event log) take the keyboard's focus, so they scroll without
// a mouse.
for (const d of document.querySelectorAll(".scroll, .scroll-x")) d.tabIndex = 0;
showView();
refresh();
setInterval(refresh, 5000);
