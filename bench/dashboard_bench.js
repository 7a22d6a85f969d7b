// The dashboard at fleet size, measured in headless Chromium (issue 35): a real `tessera serve`
// (SQLite on disk) with N simulated agents of D devices each (one node process here registers
// them and heartbeats with the agent protocol: it "runs" what it is told to start, notebooks
// reported inactive so they become held but idle, training jobs active) and J jobs submitted
// through the API (whole cards, shares, and 8-card jobs that mostly wait). Then, in Chromium
// (tests/api/dashboard_browser.js, the tests' DevTools driver):
//   - the nodes view opened cold: the time from navigation until the heat map of every device is
//     drawn and painted (goal < 1 s for 8,000 devices);
//   - the jobs view with all J jobs loaded: filtering by group, by a search and sorting by name
//     (each from the event to the next paint, on every job, not a page fetched; goal < 1 s).
//
//   node bench/dashboard_bench.js [--tessera build/tessera] [--chromium /usr/bin/chromium]
//        [--nodes 1000] [--devices 8] [--jobs 10000] [--runs 3]
//
// Run by hand (not in the test suite); prints the figures and the conditions.
"use strict";
const { spawn, execFileSync } = require("child_process");
const fs = require("fs");
const http = require("http");
const net = require("net");
const os = require("os");
const path = require("path");

const opt = { tessera: "build/tessera", chromium: "/usr/bin/chromium", nodes: 1000, devices: 8, jobs: 10000, runs: 3 };
for (let i = 2; i < process.argv.length; i += 2) {
  const k = process.argv[i].replace(/^--/, "");
  if (!(k in opt)) { console.error("unknown option " + process.argv[i]); process.exit(2); }
  opt[k] = typeof opt[k] === "number" ? Number(process.argv[i + 1]) : process.argv[i + 1];
}
const driver = path.join(__dirname, "..", "tests", "api", "dashboard_browser.js");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tessera-dashboard-bench-"));
const sleep = ms => new Promise(r => setTimeout(r, ms));

const config = `
heartbeat_timeout: 120s
cycle: 1s
idle_after: 5s
utilization_sample: 5s
max_jobs_per_identity: 100000
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: vee, role: user, groups: [vision], token: vision-token-1}
  - {name: sam, role: user, groups: [speech], token: speech-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}, {name: vision}, {name: speech}]
profiles:
  - {name: card, gpus: 1, max_gpus: 8, cpu: 1, memory: 1GiB, forms: [whole]}
  - {name: nb, gpus: 1, gpu_fraction: 0.1, gpu_memory: 8GiB, cpu: 100m, memory: 64MiB, forms: [share]}
queues:
  - {name: training, profile: card, groups: [research, vision, speech], class: training}
  - {name: notebooks, profile: nb, groups: [research, vision, speech], class: interactive}
`;

function freePort() {
  return new Promise(resolve => { const s = net.createServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); }); });
}
const keep = new http.Agent({ keepAlive: true, maxSockets: 64 });
let port = 0;
function call(method, p, token, body) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? null : Buffer.from(JSON.stringify(body));
    const req = http.request({ host: "127.0.0.1", port, method, path: p, agent: keep,
                               headers: { Authorization: "Bearer " + token, "Content-Type": "application/json",
                                          "Content-Length": data ? data.length : 0 } }, res => {
      const parts = [];
      res.on("data", c => parts.push(c));
      res.on("end", () => {
        const text = Buffer.concat(parts).toString("utf8");
        if (res.statusCode >= 300) return reject(new Error(method + " " + p + ": " + res.statusCode + " " + text.slice(0, 200)));
        try { resolve(JSON.parse(text)); } catch (e) { resolve(text); }
      });
    });
    req.on("error", reject);
    if (data) req.write(data);
    req.end();
  });
}
async function pool(n, width, fn) {  // fn(0..n-1), `width` at a time
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => { while (next < n) await fn(next++); }));
}

// The simulated agents: running jobs per node (job -> active), heartbeating every 5 s.
const running = new Map();
const notebooks = new Set();  // their jobs report no activity: held but idle
const nodeName = i => "node-" + (i + 1);
let stopping = false, beats = 0, beatErrors = 0;
async function beat(i) {
  const node = nodeName(i);
  const mine = running.get(node);
  const body = { node, running: [...mine].map(([job, active]) => ({ job, pid: 1000, active })), finished: [] };
  try {
    const r = await call("POST", "/v1/agent/heartbeat", "agent-token-1", body);
    ++beats;
    for (const s of r.start || []) mine.set(s.job, !notebooks.has(s.job));
    for (const c of r.cancel || []) mine.delete(c.job);
  } catch (e) { ++beatErrors; }
}
async function heartbeats() {
  while (!stopping) {
    const t = Date.now();
    await pool(opt.nodes, 32, beat);
    await sleep(Math.max(0, 5000 - (Date.now() - t)));
  }
}

function browse(steps, width) {
  const n = Math.random().toString(36).slice(2);
  const inFile = path.join(dir, "steps-" + n + ".json"), outFile = path.join(dir, "result-" + n + ".json");
  fs.writeFileSync(inFile, JSON.stringify({ width: width || 1600, height: 1000, steps }));
  try { execFileSync("node", [driver, opt.chromium, inFile, outFile], { stdio: "ignore" }); } catch (e) {}
  const r = JSON.parse(fs.readFileSync(outFile, "utf8"));
  if (r.error) throw new Error("browser: " + r.error + "\n" + r.console.join("\n"));
  return r.results;
}
// In the page: act, then resolve with the ms from the act to the next paint.
const timed = act => "new Promise(r => { const t = performance.now(); " + act +
                     "; requestAnimationFrame(() => setTimeout(() => r(performance.now() - t), 0)); })";
const median = xs => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const f0 = x => x.toFixed(0);

async function main() {
  port = await freePort();
  fs.writeFileSync(path.join(dir, "config.yaml"), config);
  const log = fs.openSync(path.join(dir, "serve.log"), "w");
  const server = spawn(opt.tessera, ["serve", "--config", path.join(dir, "config.yaml"), "--data", path.join(dir, "data"),
                                     "--listen", "127.0.0.1:" + port], { stdio: ["ignore", log, log] });
  process.on("exit", () => { try { server.kill("SIGTERM"); } catch (e) {} });
  for (let i = 0; i < 100; ++i) { try { await call("GET", "/v1/whoami", "admin-token-1"); break; } catch (e) { await sleep(100); } }

  let t = Date.now();
  await pool(opt.nodes, 32, async i => {
    const node = nodeName(i);
    running.set(node, new Map());
    const devices = Array.from({ length: opt.devices }, (_, d) => ({ index: d, model: "H100-80GB", memory_mib: 81559, uuid: "GPU-" + node + "-" + d, simulated: true }));
    await call("POST", "/v1/agent/register", "agent-token-1",
               { node, cpu_milli: 64000, memory_mib: 512 * 1024, simulated: true, devices, cgroups: false, protocol: 2, running: [] });
  });
  console.log(`registered ${opt.nodes} simulated agents of ${opt.devices} devices in ${((Date.now() - t) / 1000).toFixed(1)} s`);
  const beating = heartbeats();

  // The jobs: half whole cards, three tenths shares (idle: their agent reports no activity), a
  // fifth 8-card jobs (most wait); three users in three groups.
  const users = [["alice-token-1", "alice"], ["vision-token-1", "vee"], ["speech-token-1", "sam"]];
  t = Date.now();
  await pool(opt.jobs, 16, async i => {
    const [token] = users[i % 3];
    const kind = i % 10 < 5 ? "train" : i % 10 < 8 ? "nb" : "big";
    const body = { queue: kind === "nb" ? "notebooks" : "training", command: ["sleep", "100000"], name: kind + "-" + i };
    if (kind === "big") body.gpus = 8;
    const r = await call("POST", "/v1/jobs", token, body);
    if (kind === "nb") notebooks.add(r.id);
  });
  console.log(`submitted ${opt.jobs} jobs in ${((Date.now() - t) / 1000).toFixed(1)} s`);
  // Until the placements settle (the running count stops growing for 10 s, at most 180 s).
  let last = -1, still = 0;
  for (t = Date.now(); Date.now() - t < 180000 && still < 2; await sleep(5000)) {
    const s = await call("GET", "/v1/summary", "admin-token-1");
    const workers = s.groups.reduce((a, g) => a + g.workers, 0), pending = s.groups.reduce((a, g) => a + g.pending, 0);
    still = workers === last ? still + 1 : 0;
    last = workers;
    console.log(`  ${workers} running, ${pending} pending, held but idle ${s.groups.reduce((a, g) => a + (g.gpu_milli_held_idle || 0), 0) / 1000} GPUs`);
  }

  const base = "http://127.0.0.1:" + port + "/#token=admin-token-1";
  const heat = [], nodesFetch = [], render = [];
  let nodesBytes = 0, counts = "";
  for (let run = 0; run < opt.runs; ++run) {
    const r = browse([
      { goto: base + "&view=nodes" },
      { wait: "document.querySelector('#heatmap').dataset.devices == '" + opt.nodes * opt.devices + "' && window.tesseraHeatPaintedMs", timeout_ms: 60000 },
      { eval: "window.tesseraHeatPaintedMs", as: "painted" },
      { eval: "window.tesseraHeatRenderMs", as: "render" },
      { eval: "(performance.getEntriesByType('resource').find(e => /v1\\/nodes$/.test(e.name)) || {}).duration", as: "fetch" },
      { eval: "(performance.getEntriesByType('resource').find(e => /v1\\/nodes$/.test(e.name)) || {}).encodedBodySize", as: "bytes" },
      { eval: "document.querySelectorAll('#heatmap i').length", as: "cells" },
      { eval: "document.querySelector('#heat-count').textContent", as: "count" },
    ]);
    if (r.cells !== opt.nodes * opt.devices) throw new Error("drew " + r.cells + " devices");
    heat.push(r.painted); nodesFetch.push(r.fetch); render.push(r.render); nodesBytes = r.bytes; counts = r.count;
  }
  const filter = [], search = [], sort = [], loaded = [];
  let shownAfter = "";
  for (let run = 0; run < opt.runs; ++run) {
    const r = browse([
      { goto: base + "&view=jobs" },
      { wait: "/ of " + opt.jobs + " jobs/.test(document.querySelector('#jobs-count').textContent)", timeout_ms: 60000 },
      { eval: "performance.now()", as: "loaded" },
      { eval: timed("const e = document.querySelector('#f-group'); e.value = 'vision'; e.dispatchEvent(new Event('change'))"), as: "filter" },
      { eval: "document.querySelector('#jobs-count').textContent", as: "after_filter" },
      { eval: timed("const e = document.querySelector('#f-q'); e.value = 'nb-1'; e.dispatchEvent(new Event('input'))"), as: "search" },
      { eval: timed("document.querySelector('#f-q').value = ''; document.querySelector('#f-q').dispatchEvent(new Event('input')); " +
                    "const e = document.querySelector('#f-group'); e.value = ''; e.dispatchEvent(new Event('change'))"), as: "unfilter" },
      { eval: timed("document.querySelector('#jobs th[data-sort=name] button').click()"), as: "sort" },
      { eval: "document.querySelector('#jobs tbody tr[data-job]').cells[0].textContent", as: "first" },
    ]);
    filter.push(r.filter); search.push(r.search); sort.push(r.sort); loaded.push(r.loaded);
    shownAfter = r.after_filter;
  }
  stopping = true;
  await beating;
  let chromium = "";
  try { chromium = execFileSync(opt.chromium, ["--version"]).toString().trim(); } catch (e) {}
  console.log(`\nconditions: ${os.cpus().length} CPUs (${os.cpus()[0].model}), load average ${os.loadavg().map(x => x.toFixed(2)).join(" ")}, ` +
              `${chromium}, headless, 1600x1000 window; ${opt.nodes} nodes x ${opt.devices} devices, ${opt.jobs} jobs; ` +
              `${beats} heartbeats (${beatErrors} failed); median of ${opt.runs} cold page loads`);
  console.log(`nodes view: ${counts}`);
  console.log(`  all ${opt.nodes * opt.devices} devices drawn and painted ${f0(median(heat))} ms after navigation (runs: ${heat.map(f0).join(", ")}); ` +
              `goal < 1000 ms: ${median(heat) < 1000 ? "met" : "NOT met"}`);
  console.log(`  of which GET /v1/nodes ${f0(median(nodesFetch))} ms (${(nodesBytes / 1e6).toFixed(1)} MB), building the heat map ` +
              `${f0(median(render))} ms (runs: ${render.map(f0).join(", ")})`);
  console.log(`jobs view: all ${opt.jobs} jobs loaded and shown ${f0(median(loaded))} ms after navigation (runs: ${loaded.map(f0).join(", ")})`);
  console.log(`  filter by group: ${f0(median(filter))} ms (${shownAfter}); search 'nb-1': ${f0(median(search))} ms; sort by name: ${f0(median(sort))} ms ` +
              `(runs: ${filter.map(f0).join("/")}, ${search.map(f0).join("/")}, ${sort.map(f0).join("/")}); goal < 1000 ms: ` +
              `${Math.max(median(filter), median(search), median(sort)) < 1000 ? "met" : "NOT met"}`);
  server.kill("SIGTERM");
  fs.rmSync(dir, { recursive: true, force: true });
  process.exit(0);
}
main().catch(err => { console.error(err.stack || String(err)); console.error("(logs in " + dir + ")"); process.exit(1); });
