"use strict";
// The utilization charts, loaded before app.js and calling its helpers ($, el, svg, api, ui,
// milli, span, stamp, colour, ...) only when app.js renders: GPUs held over time by group, and
// held against in use per group and per form.
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
