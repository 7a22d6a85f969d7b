"use strict";
// The nodes views, loaded before app.js and calling its helpers ($, el, cell, tbody, call, ui,
// milli, gib, colour, ...) only when app.js renders: the heat map of every device, a node's card
// map, and cordon, drain and uncordon for admins with the confirmation dialog.
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
