// The dashboard: one self-contained page (no external scripts, styles or fonts) served at `/`.
// It reads the API with the token the user gives it (kept in the browser's localStorage, or
// passed once in the URL fragment, which never reaches the server) and refreshes every 5 s:
// cluster totals and idle capacity, each group's (tenant's) GPUs, CPUs and workers against its
// reservation and limit, utilization over time, and the event log.
#include "api/server.h"

namespace tessera::api {

const char* DashboardHtml() {
  return R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Tessera</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.3em; margin: 0 0 .6em; }
  h2 { font-size: 1.05em; margin: 1.4em 0 .4em; }
  table { border-collapse: collapse; }
  th, td { padding: .25em .8em; border-bottom: 1px solid #ddd; text-align: right; }
  th:first-child, td:first-child { text-align: left; }
  .cards { display: flex; gap: 1em; flex-wrap: wrap; }
  .card { border: 1px solid #ccc; border-radius: 6px; padding: .6em 1em; min-width: 9em; }
  .card b { display: block; font-size: 1.5em; }
  #error { color: #b00; }
  #events td, #events th { text-align: left; }
  svg { border: 1px solid #ddd; background: #fafafa; }
</style>
</head>
<body>
<h1>Tessera <span id="cluster-name"></span></h1>
<form id="login" hidden>
  <label>API token <input id="token" type="password" size="40"></label> <button>Show</button>
</form>
<p id="error"></p>
<div class="cards">
  <div class="card">GPUs <b id="gpus-total">-</b></div>
  <div class="card">idle GPUs <b id="gpus-idle">-</b></div>
  <div class="card">CPUs <b id="cpus-total">-</b></div>
  <div class="card">idle CPUs <b id="cpus-idle">-</b></div>
  <div class="card">nodes <b id="nodes">-</b></div>
</div>
<h2>Groups</h2>
<table id="groups"><thead><tr><th>group</th><th>GPUs held</th><th>GPUs idle (held, not running)</th>
<th>CPUs held</th><th>workers</th><th>pending</th><th>reservation</th><th>limit</th></tr></thead><tbody></tbody></table>
<h2>Waiting jobs</h2>
<table id="waiting"><thead><tr><th>job</th><th>group</th><th>queue</th><th>step</th><th>reason</th>
<th>waiting</th></tr></thead><tbody></tbody></table>
<p id="waiting-none">none</p>
<h2>Utilization (GPU allocated / total)</h2>
<svg id="util" width="720" height="140" viewBox="0 0 720 140"></svg>
<p id="util-now"></p>
<h2>Events</h2>
<table id="events"><thead><tr><th>time</th><th>kind</th><th>subject</th><th>actor</th><th>reason</th></tr></thead>
<tbody></tbody></table>
<script>
"use strict";
// Quantities arrive in integer thousandths (milli-GPU, milli-CPU): shown with up to 3 decimals.
const milli = m => (m / 1000).toFixed(3).replace(/\.?0+$/, "");
let token = "";
const frag = new URLSearchParams(location.hash.slice(1));
if (frag.get("token")) {
  token = frag.get("token");
  try { localStorage.setItem("tessera-token", token); } catch (e) {}
  history.replaceState(null, "", location.pathname);
} else {
  try { token = localStorage.getItem("tessera-token") || ""; } catch (e) {}
}
const $ = id => document.getElementById(id);
function cell(row, text) { const td = document.createElement("td"); td.textContent = text; row.appendChild(td); }
async function api(path) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + token } });
  if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()));
  return r.json();
}
function drawUtilization(samples) {
  const svg = $("util");
  svg.textContent = "";
  if (!samples.length) { $("util-now").textContent = "no samples yet"; return; }
  const w = 720, h = 140, n = samples.length;
  const pts = samples.map((s, i) => {
    const x = n === 1 ? w : (i / (n - 1)) * w;
    const frac = s.gpu_milli_total ? s.gpu_milli_allocated / s.gpu_milli_total : 0;
    return x.toFixed(1) + "," + (h - frac * (h - 4) - 2).toFixed(1);
  });
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", pts.join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#2a6");
  line.setAttribute("stroke-width", "2");
  svg.appendChild(line);
  const last = samples[n - 1];
  $("util-now").textContent = "now: " + milli(last.gpu_milli_allocated) + " of " + milli(last.gpu_milli_total) +
      " GPUs allocated, " + last.workers + " workers, " + last.pending + " pending (" + n + " samples)";
}
async function refresh() {
  if (!token) { $("login").hidden = false; return; }
  try {
    const [sum, util, ev, pend] = await Promise.all([api("/v1/summary"), api("/v1/utilization"),
                                                     api("/v1/events?limit=50"), api("/v1/jobs?state=pending&limit=50")]);
    $("error").textContent = "";
    const c = sum.cluster;
    $("gpus-total").textContent = milli(c.gpu_milli_total);
    $("gpus-idle").textContent = milli(c.gpu_milli_idle);
    $("cpus-total").textContent = milli(c.cpu_milli_total);
    $("cpus-idle").textContent = milli(c.cpu_milli_idle);
    $("nodes").textContent = c.nodes;
    const gb = $("groups").tBodies[0];
    gb.textContent = "";
    for (const g of sum.groups) {
      const row = gb.insertRow();
      row.dataset.group = g.group;
      cell(row, g.group);
      cell(row, milli(g.gpu_milli_total));
      cell(row, milli(g.gpu_milli_idle));
      cell(row, milli(g.cpu_milli_total));
      cell(row, g.workers);
      cell(row, g.pending);
      cell(row, milli(g.gpu_milli_reservation));
      cell(row, g.gpu_milli_limit ? milli(g.gpu_milli_limit) : "none");
    }
    // What holds each waiting job: the scheduling cycle's step and reason.
    const wb = $("waiting").tBodies[0];
    wb.textContent = "";
    for (const j of pend.jobs) {
      const row = wb.insertRow();
      row.dataset.job = j.id;
      cell(row, j.id);
      cell(row, j.group);
      cell(row, j.queue);
      cell(row, j.wait ? j.wait.step : "");
      cell(row, j.wait ? j.wait.reason : j.reason);
      cell(row, Math.round((Date.now() - j.submit_ms) / 1000) + " s");
    }
    $("waiting-none").hidden = pend.jobs.length > 0;
    drawUtilization(util.samples);
    const eb = $("events").tBodies[0];
    eb.textContent = "";
    for (const e of ev.events.slice().reverse()) {
      const row = eb.insertRow();
      cell(row, new Date(e.time_ms).toISOString().replace("T", " ").slice(0, 19));
      cell(row, e.kind);
      cell(row, e.subject);
      cell(row, e.actor);
      cell(row, e.reason);
    }
  } catch (err) {
    $("error").textContent = String(err.message || err);
  }
}
$("login").addEventListener("submit", ev => {
  ev.preventDefault();
  token = $("token").value;
  try { localStorage.setItem("tessera-token", token); } catch (e) {}
  $("login").hidden = true;
  refresh();
});
refresh();
setInterval(refresh, 5000);
</script>
</body>
</html>
)HTML";
}

}  // namespace tessera::api
