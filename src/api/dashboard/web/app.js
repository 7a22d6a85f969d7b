"use strict";
// The dashboard's script, in sections: formatting, the token and the URL fragment, calls, DOM
// helpers, colours, then one section per view (overview, card map, utilization, groups, jobs and a
// job's page, queues, events, what-if), and the refresh loop with its event handlers.
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
  return d < 5000 ? "just now" : d >= 0 ? span(d) + " ago" : "in " + span(-d);
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
  $("gpus-held").textContent = gpus(Math.max(0, c.gpu_milli_total - c.gpu_milli_idle));
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

// The nodes view: a heat map, one square per device (coloured by how full it is, held but idle,
// free, or unavailable), one tile per node; a tile links to that node's card map. Built as one
// string of markup: thousands of devices draw in one go.
const HEAT = [["free", "free"], ["part", "partly held"], ["full", "fully held"], ["idle", "held but idle"],
              ["off", "unavailable (lost, unhealthy, cordoned or drained)"]];
const esc = t => String(t).replace(/[&<>"]/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
const inactive = x => x && x !== "active";
function heatClass(n, d) {
  if (n.state !== "ready" || d.health === "unhealthy" || inactive(d.admin_state) || inactive(n.admin_state)) return "off";
  if (d.holders.some(h => h.idle)) return "idle";
  const u = d.gpu_milli_used || 0;
  return u <= 0 ? "free" : u >= 1000 ? "full" : "part";
}
function deviceNote(n, d, k) {
  const who = [...new Set(d.holders.map(h => h.group).filter(g => g))].join(", ");
  return "GPU " + d.index + " " + d.model + ": " + (k === "off" ? (n.state !== "ready" ? n.state : d.health === "unhealthy" ? "unhealthy" +
         (d.health_reason ? " (" + d.health_reason + ")" : "") : d.admin_state || n.admin_state) + ", " : "") +
         (d.gpu_milli_used ? gpus(d.gpu_milli_used) + " GPU held" + (who ? " by " + who : "") + (k === "idle" ? ", idle" : "") : "free");
}
function renderHeat(nodes) {
  const all = nodes.nodes.slice().sort((a, b) => byName(a.name, b.name));
  const total = { free: 0, part: 0, full: 0, idle: 0, off: 0 };
  const named = all.length <= 64;
  const t0 = performance.now();
  let html = "", devices = 0;
  for (const n of all) {
    const c = { free: 0, part: 0, full: 0, idle: 0, off: 0 };
    let cells = "";
    for (const d of n.devices) {
      const k = heatClass(n, d);
      ++c[k]; ++total[k]; ++devices;
      cells += '<i class="h-' + k + '" title="' + esc(n.name + " " + deviceNote(n, d, k)) + '"></i>';
    }
    const state = n.state !== "ready" ? n.state : inactive(n.admin_state) ? n.admin_state : "";
    const label = n.name + (state ? " (" + state + ")" : "") + ": " + plural(n.devices.length, "device") + ", " +
        HEAT.filter(([k]) => c[k]).map(([k, t]) => c[k] + " " + t.replace(/ \(.*/, "")).join(", ");
    html += '<a class="hn' + (state ? " hn-" + esc(state) : "") + '" href="#view=cards&amp;node=' + esc(encodeURIComponent(n.name)) +
            '" data-node="' + esc(n.name) + '" data-idle="' + c.idle + '" aria-label="' + esc(label) + '">' +
            (named ? '<span class="hn-name">' + esc(n.name) + "</span>" : "") + '<span class="hn-cells">' + cells + "</span></a>";
  }
  const map = $("heatmap");
  map.innerHTML = html || '<p class="note">No nodes yet: start an agent.</p>';
  map.dataset.devices = devices;
  map.dataset.nodes = all.length;
  const l = $("heat-legend");
  if (!l.childElementCount) for (const [k, t] of HEAT) l.append(el("span", { class: "hk h-" + k, "data-heat": k, text: t }));
  for (const s of l.children) s.dataset.count = total[s.dataset.heat];
  $("heat-count").textContent = plural(devices, "device") + " on " + plural(all.length, "node") + ": " +
      HEAT.map(([k, t]) => total[k] + " " + t.replace(/ \(.*/, "")).join(", ") + ".";
  // For bench/dashboard_bench.js: how long drawing took, and when the first heat map was painted
  // (ms since navigation).
  window.tesseraHeatRenderMs = performance.now() - t0;
  if (!window.tesseraHeatPaintedMs) requestAnimationFrame(() => setTimeout(() => { window.tesseraHeatPaintedMs = performance.now(); }, 0));
}

// The card map: a bar per device; its segments are the device's partitions and holdings, each as
// wide as its memory (gpu_memory_mib / memory_mib of the device).
function segment(node, dev, h, part) {
  const mem = h ? h.gpu_memory_mib : (part ? partMemory(part.profile, dev) : 0);
  const pct = dev.memory_mib > 0 ? Math.max(0, Math.min(100, 100 * mem / dev.memory_mib)) : 0;
  const group = h ? (h.group || "") : "";
  const what = h ? [h.job, h.identity, group, h.form, part ? part.profile : h.partition, gpus(h.gpu_milli) + " GPU", gib(h.gpu_memory_mib)]
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
// One page of nodes at a time (ui.npp a page, 10 unless chosen), filtered by a node name or a
// group, user or job holding something on it: thousands of devices never make one long scroll.
function nodeMatches(n, f) {
  if (!f) return true;
  if (n.name.toLowerCase().includes(f)) return true;
  return n.devices.some(d => d.holders.some(h => [h.group, h.identity, h.job].some(x => x && String(x).toLowerCase() === f)) ||
                             String(d.model).toLowerCase().includes(f));
}
function renderCards(nodes) {
  const groups = new Set();
  const root = $("cardmap");
  root.textContent = "";
  const f = ui.node.trim().toLowerCase();
  const all = nodes.nodes.slice().sort((a, b) => byName(a.name, b.name));
  const exact = all.filter(n => n.name.toLowerCase() === f);  // a node's own name: that node only
  const shown = exact.length ? exact : all.filter(n => nodeMatches(n, f));
  const per = Number(ui.npp) || 10;
  const pages = Math.max(1, Math.ceil(shown.length / per));
  const page = Math.min(Math.max(1, Number(ui.npage) || 1), pages);
  const devices = shown.reduce((t, n) => t + n.devices.length, 0);
  $("cards-count").textContent = (shown.length ? "nodes " + ((page - 1) * per + 1) + "–" + Math.min(page * per, shown.length) + " of " : "") +
      shown.length + (f ? " matching (" + all.length + " in all)" : "") + " · " + plural(devices, "device");
  pager("cards-pager", page, pages, to => { ui.npage = String(to); writeHash(); if (data.nodes) renderCards(data.nodes); });
  for (const n of all) for (const d of n.devices) for (const h of d.holders) if (h.group) groups.add(h.group);
  for (const n of shown.slice((page - 1) * per, page * per)) {
    const used = n.devices.reduce((t, d) => t + (d.gpu_milli_used || 0), 0);
    const adm = n.admin_state || "active";
    const box = el("div", { class: "node", "data-node": n.name, "data-state": n.state, "data-admin-state": adm },
                   el("div", { class: "node-head" },
                      el("h3", { text: n.name + " — " + n.state + (adm !== "active" ? " · " + adm : "") + (n.simulated ? " (simulated)" : "") + " · " +
                                       plural(n.devices.length, "device") + " · " + gpus(used) + " of " + n.devices.length + " GPUs held" }),
                      ...nodeActions(n.name, adm)));
    if (nodeAnswer.node === n.name && nodeAnswer.text) box.append(el("p", { class: "node-answer" + (nodeAnswer.bad ? " bad" : ""), role: "status", text: nodeAnswer.text }));
    for (const d of n.devices) {
      const bar = el("div", { class: "bar", role: "group", "aria-label": "device " + d.index });
      const byPart = new Map();
      for (const h of d.holders) if (h.partition) byPart.set(h.partition, h);
      const parts = (d.partitions || []).slice().sort((a, b) => a.start - b.start);
      for (const p of parts) bar.append(segment(n, d, byPart.get(p.name) || (p.job ? { job: p.job, form: "partition", gpu_memory_mib: partMemory(p.profile, d), gpu_milli: 0 } : null), p));
      for (const h of d.holders) if (!h.partition || !parts.some(p => p.name === h.partition)) bar.append(segment(n, d, h, null));
      const layout = d.mig ? "MIG" : (d.amd_mode || "");
      const t = d.telemetry;
      box.append(el("div", { class: "device", "data-node": n.name, "data-device": d.index, "data-model": d.model, "data-layout": layout || null },
        el("div", null, el("b", { text: "GPU " + d.index }), " ", d.model, el("br"), el("small", { class: "muted", text: layout + (d.draining ? " draining" : "") })),
        bar,
        el("div", { class: "info", text: gpus(d.gpu_milli_used) + " GPU · " + gib(d.gpu_memory_mib_used) + " of " + gib(d.memory_mib) +
                                          (t && t.util_pct !== undefined ? " · " + t.util_pct + "% busy" : "") })));
    }
    root.append(box);
  }
  if (!nodes.nodes.length) root.append(el("p", { class: "note", text: "No nodes yet: start an agent." }));
  else if (!shown.length) root.append(el("p", { class: "note", text: "No node matches “" + ui.node + "”." }));
  legend("legend", [...groups].sort());
}

// Cordon, drain and uncordon a node (admins): cordon and uncordon at once, drain after a
// confirmation (its running jobs are stopped and requeued); the server's answer is shown.
let nodeAnswer = { node: "", text: "", bad: false };
function nodeActions(node, adm) {
  if (!me || me.role !== "admin") return [];
  const acts = adm === "active" ? ["cordon", "drain"] : adm === "cordoned" ? ["drain", "uncordon"] : ["uncordon"];
  const label = { cordon: "Cordon", drain: "Drain…", uncordon: "Uncordon" };
  return acts.map(a => el("button", { type: "button", class: a === "drain" ? "danger" : "", "data-node-action": a, "data-node": node,
                                      "aria-label": label[a].replace("…", "") + " " + node, text: label[a] }));
}
async function nodeAction(node, action) {
  nodeAnswer = { node, text: action + "…", bad: false };
  try {
    const n = await call("/v1/nodes/" + encodeURIComponent(node) + "/" + action, "POST");
    nodeAnswer = { node, bad: false, text: "The server accepted: " + node + " is " + (n && n.admin_state ? n.admin_state : action + "ed") + "." };
  } catch (err) {
    nodeAnswer = { node, bad: true, text: "The server refused to " + action + " " + node + ": " + String(err.message || err) };
  }
  refresh();
}
function confirmWith(text, yes, no, action, subject) {
  $("confirm-text").textContent = text;
  $("confirm-yes").textContent = yes;
  $("confirm-no").textContent = no;
  $("confirm").dataset.action = action;
  $("confirm").dataset.subject = subject;
  $("confirm").showModal();
}

// Utilization: stacked areas by group with a time axis (HH:MM) and a GPU axis; the capacity as a
// dashed line, the held-but-idle GPUs as a dotted one.
async function loadUtilization(range, ids) {
  range = range || RANGES[ui.range];
  ids = ids || { chart: "util", legend: "util-legend", now: "util-now" };
  const step = Math.max(1000, Math.ceil(range / 300 / 1000) * 1000);  // at most ~300 points
  const u = await load("utilization", "/v1/utilization?by=group&since=" + (Date.now() - range) + "&step=" + step);
  if (u) drawUtilization(u, range, ids);
  if (u && ids.chart === "ov-util") {
    // "Now" from the latest sample itself (the chart's points are averages over their step).
    const now = await load("utilization-now", "/v1/utilization?by=group&since=" + (Date.now() - 60000));
    drawHeldIdle(u, range, now && now.samples && now.samples.length ? now.samples[now.samples.length - 1] : null);
  }
}

// Held against in use over time per group and per form (the samples' by.group[G].form), idle
// counted where it is: a table of now (the latest sample), and a small chart per group, its forms
// stacked, each solid where in use and hatched where held but idle.
const FORMS = [["whole", "whole cards", 1], ["partition", "partitions", 0.7], ["share", "shares", 0.45], ["other", "other", 0.3]];
function formsOf(row) {  // {form: {held, idle}}; a sample from before forms were kept: "other"
  const out = {};
  if (row && row.form) for (const [f, v] of Object.entries(row.form)) out[FORMS.some(x => x[0] === f) ? f : "other"] = { held: v.gpu_milli || 0, idle: v.gpu_milli_held_idle || 0 };
  else if (row && row.gpu_milli) out.other = { held: row.gpu_milli, idle: row.gpu_milli_held_idle || 0 };
  return out;
}
function drawHeldIdle(u, range, latest) {
  const s = u.samples || [];
  const groups = [...new Set(s.flatMap(x => Object.keys(x.by || {})).concat(latest ? Object.keys(latest.by || {}) : []))].sort();
  const last = latest ? latest.by || {} : s.length ? s[s.length - 1].by || {} : {};
  const b = tbody("held-idle");
  const rows = [];
  for (const g of groups) for (const [f, v] of Object.entries(formsOf(last[g]))) if (v.held) rows.push([g, f, v]);
  rows.sort((x, y) => y[2].idle - x[2].idle || x[0].localeCompare(y[0]));
  for (const [g, f, v] of rows) {
    const r = b.insertRow();
    r.dataset.group = g; r.dataset.form = f; r.dataset.idle = v.idle;
    r.insertCell().append(swatch(g));
    cell(r, (FORMS.find(x => x[0] === f) || [f, f])[1]);
    cell(r, gpus(v.held), "num"); cell(r, gpus(v.held - v.idle), "num");
    cell(r, gpus(v.idle), "num" + (v.idle ? " warn" : ""));
  }
  if (!rows.length) b.insertRow().insertCell().textContent = "no group holds GPUs now";
  const box = $("held-idle-charts");
  box.textContent = "";
  const W = 400, H = 130, L = 34, R = 6, T = 6, B = 20, t1 = Date.now(), t0 = t1 - range, step = u.step_ms || 1000;
  const X = t => L + (W - L - R) * (t - t0) / range;
  for (const g of groups) {
    const per = s.map(x => formsOf((x.by || {})[g]));
    let ymax = 1000;
    for (const p of per) ymax = Math.max(ymax, Object.values(p).reduce((t, v) => t + v.held, 0));
    ymax = Math.ceil(ymax / 1000) * 1000;
    const Y = v => H - B - (H - T - B) * v / ymax;
    const now = formsOf(last[g]);
    const held = Object.values(now).reduce((t, v) => t + v.held, 0), idle = Object.values(now).reduce((t, v) => t + v.idle, 0);
    const title = g + ": " + gpus(held) + " GPUs held now, " + gpus(idle) + " of them idle";
    const chart = svg("svg", { viewBox: "0 0 " + W + " " + H, class: "chart small", role: "img", "aria-label": title + " (last hour)", "data-group": g });
    const pid = "hatch-" + hashOf(g);
    const pat = svg("pattern", { id: pid, width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" });
    pat.append(svg("rect", { width: 6, height: 6, fill: colour(g), "fill-opacity": "0.25" }), svg("rect", { width: 3, height: 6, fill: colour(g) }));
    const defs = svg("defs");
    defs.append(pat);
    chart.append(defs);
    for (const v of [0, ymax / 2, ymax]) {
      chart.append(svg("line", { class: "axis", x1: L, x2: W - R, y1: Y(v), y2: Y(v) }));
      chart.append(svg("text", { x: L - 4, y: Y(v) + 4, "text-anchor": "end" }, milli(v)));
    }
    chart.append(svg("text", { x: L, y: H - 5 }, hhmm(t0)), svg("text", { x: W - R, y: H - 5, "text-anchor": "end" }, hhmm(t1)));
    const base = s.map(() => 0);
    for (const [f, name, op] of FORMS) {
      for (const part of ["used", "idle"]) {
        const val = per.map(p => p[f] ? (part === "idle" ? p[f].idle : p[f].held - p[f].idle) : 0);
        if (!val.some(v => v > 0)) continue;
        const top = val.map((v, i) => base[i] + v);
        let d = "";
        s.forEach((x, i) => { d += (i ? "L" : "M") + X(x.time_ms).toFixed(1) + "," + Y(top[i]).toFixed(1) + "L" + X(x.time_ms + step).toFixed(1) + "," + Y(top[i]).toFixed(1); });
        for (let i = s.length - 1; i >= 0; --i) d += "L" + X(s[i].time_ms + step).toFixed(1) + "," + Y(base[i]).toFixed(1) + "L" + X(s[i].time_ms).toFixed(1) + "," + Y(base[i]).toFixed(1);
        const p = svg("path", { d: d + "Z", fill: part === "idle" ? "url(#" + pid + ")" : colour(g), "fill-opacity": part === "idle" ? "1" : String(op),
                                "data-group": g, "data-form": f, "data-part": part });
        p.append(svg("title", {}, g + " · " + name + " · " + (part === "idle" ? "held but idle" : "in use")));
        chart.append(p);
        top.forEach((v, i) => { base[i] = v; });
      }
    }
    const parts = FORMS.filter(([f]) => now[f] && now[f].held).map(([f, name]) => name + " " + gpus(now[f].held) + (now[f].idle ? " (" + gpus(now[f].idle) + " idle)" : ""));
    box.append(el("figure", { "data-group": g }, el("figcaption", null, swatch(g), " " + gpus(held) + " held now, " + gpus(idle) + " idle" +
                                                   (parts.length ? ": " + parts.join(", ") : "")), chart));
  }
}
function drawUtilization(u, range, ids) {
  const s = u.samples || [];
  const chart = $(ids.chart);
  chart.textContent = "";
  chart.setAttribute("data-points", s.length);
  chart.setAttribute("data-step", u.step_ms || 0);
  chart.setAttribute("data-first-time", s.length ? s[0].time_ms : "");
  const W = 1000, H = 300, L = 48, R = 12, T = 10, B = 28;
  const t1 = Date.now(), t0 = t1 - range;
  const groups = [...new Set(s.flatMap(x => Object.keys(x.by || {})))].sort();
  legend(ids.legend, groups);
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
    if (ids.now) $(ids.now).textContent = "";
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
  if (!ids.now) return;
  $(ids.now).textContent = "latest (" + stamp(last.time_ms) + "): " + milli(last.gpu_milli_allocated) + " of " + milli(last.gpu_milli_total) +
      " GPUs allocated, " + milli(last.gpu_milli_held_idle || 0) + " held but idle, " + last.workers + " workers, " + last.pending +
      " pending · " + s.length + " points, one per " + span(step) + ". Dashed: capacity; dotted: held but idle.";
}

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
// The scheduler's reasons say when devices are expected free in epoch seconds ("expected free at
// t=1796242375s"): shown as a time for people ("at 14:32 (in 59 min)"), as the CLI does.
const humanTimes = text => String(text || "").replace(/\bat t=(\d{9,})s\b/g, (m, s) => "at " + hhmm(s * 1000) + " (" + ago(s * 1000) + ")");
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
