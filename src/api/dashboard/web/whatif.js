"use strict";
// The what-if view, loaded before app.js and calling its helpers ($, el, cell, tbody, api, call's
// errorText, errors, showErrors, signIn, me, token, RANGES, span) only once the page runs:
// - the observed jobs replayed by the simulator under other forms for a class (GET /v1/whatif);
// - a fleet's own GPU usage history uploaded (DCGM series as a Prometheus range-query answer, or
//   CSV workload,timestamp,gpu_util_pct,gpu_memory_bytes) and replayed by the parser and planner
//   of `tessera whatif --usage FILE` (POST /v1/whatif/usage): cards needed as whole cards, under
//   forms and with swapping, beside the lower bound, and per workload its peak memory, duty cycle
//   and idle spans.

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

// The server refuses bodies over 1 MiB: a larger history is said to be so before it is sent.
const USAGE_MAX_BYTES = 1024 * 1024;
const USAGE_PLANS = { whole: "whole cards", forms: "forms (class to form)", swap: "forms with swapping" };
const USAGE_ROWS = 100;  // workloads listed
let usageRun = 0;  // the latest replay asked for: an earlier answer arriving later is dropped
function usageSay(text, bad) {
  const note = $("usage-note");
  note.textContent = text;
  note.classList.toggle("bad", Boolean(bad));
}
const seconds = ms => (Math.round(ms / 100) / 10).toFixed(1) + " s";
const gpuHours = milliMs => (Math.round(milliMs / 3.6e8) / 10).toFixed(1);
async function runUsage() {
  const file = $("u-file").files[0];
  if (!file) { usageSay("Choose a usage history file (CSV or Prometheus JSON) first.", true); return; }
  if (file.size > USAGE_MAX_BYTES) {
    usageSay(file.name + " is " + (Math.round(file.size / 104857.6) / 10) + " MiB, over the 1 MiB this page sends: replay it with tessera whatif --usage " +
             file.name + ".", true);
    return;
  }
  const run = ++usageRun;
  $("usage-result").hidden = true;
  usageSay("replaying " + file.name + "…");
  const q = new URLSearchParams({ name: file.name, card: $("u-card").value.trim(), host_gbps: $("u-host").value.trim() });
  let r;
  try {
    r = await fetch("/v1/whatif/usage?" + q, { method: "POST", body: await file.text(),
        headers: { Authorization: "Bearer " + token, "Content-Type": /\.json$/i.test(file.name) ? "application/json" : "text/csv" } });
  } catch (err) {
    if (run === usageRun) usageSay("The server cannot be reached.", true);
    return;
  }
  if (run !== usageRun) return;
  if (r.status === 401) { signIn(await errorText(r)); return; }
  if (r.status === 403) { usageSay("The what-if replay is for admins.", true); return; }
  if (!r.ok) { usageSay("The server could not read " + file.name + ": " + await errorText(r), true); return; }
  showUsage(await r.json(), file.name);
}
function showUsage(w, name) {
  const h = w.history, lb = w.lower_bound;
  const plan = Object.fromEntries(w.plans.map(p => [p.plan, p]));
  usageSay(name + ": " + plural(h.workloads, "workload") + ", " + h.samples + " samples every " + span(h.step_ms) + " over " +
           span(h.end_ms - h.start_ms) + ", on " + w.card + "; gaps " + h.gaps + ", resets " + h.resets + ", duplicates " + h.duplicates +
           ", memory restarts " + h.restarts + ".");
  $("usage-answer").textContent = "Cards needed: " + plan.whole.cards + " as whole cards, " + plan.forms.cards + " under forms, " +
      plan.swap.cards + " with swapping; at least " + lb.cards + " whatever the scheduler (the memory of the workloads active at once)." +
      (w.swap_within_wake_limit ? "" : " No overcommit kept the wake p99 within " + seconds(w.options.wake_p99_limit_ms) +
                                       ": the swap plan shown has the shortest.");
  const b = tbody("usage-plans");
  for (const key of ["whole", "forms", "swap"]) {
    const p = plan[key];
    const teams = Object.values(p.teams || {});
    const row = b.insertRow();
    row.dataset.plan = key;
    cell(row, USAGE_PLANS[key] + (key === "swap" && p.overcommit_pct ? " (overcommit " + p.overcommit_pct + "%)" : ""));
    cell(row, String(p.cards), "num"); cell(row, String(p.whole), "num"); cell(row, String(p.partitions), "num");
    cell(row, String(p.shares), "num"); cell(row, String(p.swapping), "num");
    cell(row, key === "swap" ? seconds(p.wake_p50_ms) : "", "num"); cell(row, key === "swap" ? seconds(p.wake_p99_ms) : "", "num");
    cell(row, gpuHours(teams.reduce((s, t) => s + t.held_gpu_milli_ms, 0)), "num");
    cell(row, gpuHours(teams.reduce((s, t) => s + t.used_gpu_milli_ms, 0)), "num");
  }
  const row = b.insertRow();
  row.dataset.plan = "lower-bound";
  cell(row, "lower bound (any scheduler)"); cell(row, String(lb.cards), "num");
  for (let i = 0; i < 8; ++i) cell(row, "");
  const wb = tbody("usage-workloads");
  for (const x of w.workloads.slice(0, USAGE_ROWS)) {
    const r = wb.insertRow();
    r.dataset.workload = x.workload;
    cell(r, x.workload); cell(r, x.team); cell(r, x.class); cell(r, String(x.gpus), "num");
    cell(r, gib(x.peak_memory_mib), "num"); cell(r, gib(x.cap_mib), "num");
    cell(r, (x.duty_per_mille / 10).toFixed(1) + "%", "num"); cell(r, String(x.idle_spans), "num"); cell(r, span(x.idle_longest_ms), "num");
  }
  $("usage-workloads-count").textContent = w.workloads.length > USAGE_ROWS
      ? "The first " + USAGE_ROWS + " of " + w.workloads.length + " workloads." : plural(w.workloads.length, "workload") + ".";
  $("usage-result").hidden = false;
}
document.getElementById("whatif-form").addEventListener("submit", ev => { ev.preventDefault(); runWhatIf(); });
document.getElementById("usage-form").addEventListener("submit", ev => { ev.preventDefault(); runUsage(); });
document.getElementById("u-file").addEventListener("change", () => runUsage());  // choosing a file replays it
