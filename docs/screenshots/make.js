// Makes the dashboard's screenshots in this folder: every view (and a job's page, the sign-in
// box, and the what-if page's answer to an uploaded usage history) at 1600 and at 420 px wide, in
// headless Chromium (tests/api/dashboard_browser.js, puppeteer-core) against a real
// `tessera serve` with real simulated agents (`tessera agent --simulate`) and the jobs of three
// teams in every form (whole cards, MIG partitions, shares; some held but idle, some waiting).
//
//   node docs/screenshots/make.js [--tessera build/tessera] [--chromium /usr/bin/chromium]
//
// Writes VIEW-1600.png and VIEW-420.png here (the viewport: 1600x1000 and 420x900).
"use strict";
const { spawn, execFileSync } = require("child_process");
const fs = require("fs");
const http = require("http");
const net = require("net");
const os = require("os");
const path = require("path");

const opt = { tessera: "build/tessera", chromium: "/usr/bin/chromium" };
for (let i = 2; i < process.argv.length; i += 2) opt[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const here = __dirname;
const driver = path.join(here, "..", "..", "tests", "api", "dashboard_browser.js");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tessera-screenshots-"));
const sleep = ms => new Promise(r => setTimeout(r, ms));
// Jobs run as this account (an identity's run_as): root's agents run them as nobody.
const me = process.geteuid() === 0 ? "nobody" : os.userInfo().username;

const config = `
heartbeat_timeout: 20s
cycle: 300ms
idle_after: 3s
utilization_sample: 1s
identities:
  - {name: admin, role: admin, token: admin-token-1, run_as: ${me}}
  - {name: vee, role: user, groups: [vision], token: vision-token-1, run_as: ${me}}
  - {name: sam, role: user, groups: [speech], token: speech-token-1, run_as: ${me}}
  - {name: rita, role: user, groups: [research], token: research-token-1, run_as: ${me}}
  - {name: agent, role: agent, token: agent-token-1}
groups:
  - {name: vision, reservation: {gpu: 4}, limit: {gpu: 12}}
  - {name: speech, reservation: {gpu: 2}}
  - {name: research}
profiles:
  - {name: serve, gpus: 1, gpu_fraction: 0.1, gpu_memory: 10GB, cpu: 100m, memory: 64MiB, forms: [partition, share, whole]}
  - {name: nb, gpus: 1, gpu_fraction: 0.1, gpu_memory: 8GiB, cpu: 100m, memory: 64MiB, forms: [share]}
  - {name: card, gpus: 1, max_gpus: 8, cpu: 100m, memory: 64MiB, forms: [whole]}
class_forms:
  inference: [partition, share, whole]
queues:
  - {name: inference, profile: serve, groups: [vision, research], class: inference}
  - {name: notebooks, profile: nb, groups: [vision, speech, research], class: interactive}
  - {name: training, profile: card, groups: [vision, speech, research], class: training}
`;

function freePort() {
  return new Promise(resolve => { const s = net.createServer().listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); }); });
}
let port = 0;
function call(method, p, token, body) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? null : Buffer.from(JSON.stringify(body));
    const req = http.request({ host: "127.0.0.1", port, method, path: p,
                               headers: { Authorization: "Bearer " + token, "Content-Type": "application/json", "Content-Length": data ? data.length : 0 } },
                             res => { const parts = []; res.on("data", c => parts.push(c));
                                      res.on("end", () => { const t = Buffer.concat(parts).toString(); try { resolve(JSON.parse(t)); } catch (e) { resolve(t); } }); });
    req.on("error", reject);
    if (data) req.write(data);
    req.end();
  });
}
const children = [];
function start(args, name) {
  const log = fs.openSync(path.join(dir, name + ".log"), "w");
  const p = spawn(opt.tessera, args, { stdio: ["ignore", log, log], detached: true });
  children.push(p);
  return p;
}
function stopAll() { for (const c of children) { try { process.kill(-c.pid, "SIGTERM"); } catch (e) {} } }
process.on("exit", stopAll);

// A fleet's GPU usage history for the what-if page's upload (CSV, one-minute samples over 6 hours):
// per team notebooks mostly idle, an inference server busy most of the time, a training job of 4
// GPUs always busy.
function fleetUsage() {
  const file = path.join(dir, "fleet-usage.csv");
  const GiB = 1024 * 1024 * 1024;
  const rows = ["workload,timestamp,gpu_util_pct,gpu_memory_bytes,team,requested_gpus"];
  const workloads = [  // name, team, GiB, GPUs, busy(minute)
    ["vision/nb-vee", "vision", 16, 1, m => m % 60 < 6], ["vision/nb-val", "vision", 20, 1, m => m % 90 >= 40 && m % 90 < 52],
    ["vision/detector", "vision", 22, 1, m => m % 10 < 8], ["speech/nb-sam", "speech", 24, 1, m => m % 120 < 20],
    ["speech/whisper-train", "speech", 70, 4, () => true], ["research/nb-rita", "research", 12, 1, m => m % 60 >= 30 && m % 60 < 36],
    ["research/nb-ron", "research", 12, 1, m => m % 45 < 4], ["research/llm-serve", "research", 38, 1, m => m % 20 < 19],
  ];
  for (const [name, team, gib, gpus, busy] of workloads) {
    for (let m = 0; m < 360; ++m) {
      rows.push([name, 1780000000 + 60 * m, busy(m) ? 85 : 0, gib * GiB, team, gpus].join(","));
    }
  }
  fs.writeFileSync(file, rows.join("\n") + "\n");
  return file;
}

async function main() {
  port = await freePort();
  fs.writeFileSync(path.join(dir, "config.yaml"), config);
  fs.writeFileSync(path.join(dir, "agent-token"), "agent-token-1\n", { mode: 0o600 });
  start(["serve", "--config", path.join(dir, "config.yaml"), "--data", path.join(dir, "data"), "--listen", "127.0.0.1:" + port], "serve");
  for (let i = 0; i < 100; ++i) { try { if ((await call("GET", "/v1/whoami", "admin-token-1")).name) break; } catch (e) {} await sleep(100); }
  const nodes = [["gpu-a1", "4xA100-80GB"], ["gpu-a2", "4xA100-80GB"], ["gpu-h1", "8xH100-80GB"], ["gpu-h2", "8xH100-80GB"], ["gpu-h3", "8xH100-80GB"]];
  for (const [node, sim] of nodes) {
    start(["agent", "--server", "http://127.0.0.1:" + port, "--token-file", path.join(dir, "agent-token"), "--node", node,
           "--simulate", sim, "--work", path.join(dir, "work-" + node), "--cgroup-root", ""], "agent-" + node);
  }
  for (let i = 0; i < 300; ++i) {
    const n = await call("GET", "/v1/nodes", "admin-token-1");
    if (n.nodes && n.nodes.filter(x => x.state === "ready").length === nodes.length) break;
    await sleep(200);
  }
  const busy = ["sh", "-c", "while :; do :; done"];
  const idle = ["sleep", "100000"];
  const jobs = [
    ["vision-token-1", "training", "resnet-train", busy, 4], ["vision-token-1", "training", "vit-finetune", idle, 2],
    ["vision-token-1", "inference", "detector-serve", idle, 0, "partition"], ["vision-token-1", "inference", "ocr-serve", idle, 0, "partition"],
    ["vision-token-1", "notebooks", "vee-notebook", idle], ["speech-token-1", "notebooks", "sam-notebook", idle],
    ["speech-token-1", "training", "whisper-train", idle, 8], ["speech-token-1", "training", "tts-train", idle, 4],
    ["research-token-1", "notebooks", "rita-notebook", idle], ["research-token-1", "inference", "llm-serve", idle, 0, "share"],
    ["research-token-1", "training", "big-sweep", idle, 8], ["research-token-1", "training", "another-sweep", idle, 8],
  ];
  for (const [token, queue, name, command, gpus, form] of jobs) {
    const body = { queue, name, command };
    if (gpus) body.gpus = gpus;
    if (form) body.form = form;
    const r = await call("POST", "/v1/jobs", token, body);
    if (!r.id) console.error("submit " + name + ": " + JSON.stringify(r));
  }
  console.log("waiting 20 s for placements, idle marks and a few utilization samples");
  await sleep(20000);
  const jl = await call("GET", "/v1/jobs?limit=100", "admin-token-1");
  const one = (jl.jobs || []).find(j => j.spec && j.spec.name === "vee-notebook");
  const base = "http://127.0.0.1:" + port + "/#token=admin-token-1";
  const pages = [["overview", "", "document.querySelector('#held-idle-charts figure')"],
                 ["nodes", "&view=nodes", "document.querySelector('#heatmap a.hn')"],
                 ["cards", "&view=cards", "document.querySelector('#cardmap .seg')"],
                 ["utilization", "&view=utilization", "document.querySelector('#util path[data-group]')"],
                 ["groups", "&view=groups", "document.querySelector('#groups tbody tr')"],
                 ["jobs", "&view=jobs", "document.querySelector('#jobs tbody tr[data-job]')"],
                 ["job", "&view=jobs&job=" + (one ? one.id : ""), "document.querySelector('#job-detail [data-job-state]')"],
                 ["queues", "&view=queues", "document.querySelector('#queues tbody tr')"],
                 ["events", "&view=events", "document.querySelector('#events tbody tr')"],
                 ["whatif", "&view=whatif", "/replayed|admins/.test(document.querySelector('#whatif-note').textContent)",
                  [{ upload: "#u-file", file: fleetUsage() }, { wait: "!document.querySelector('#usage-result').hidden", timeout_ms: 30000 }]]];
  for (const [width, height] of [[1600, 1000], [420, 900]]) {
    for (const [name, hash, ready, more] of pages.concat([["signin", null, "!document.querySelector('#login').hidden"]])) {
      const file = path.join(here, name + "-" + width + ".png");
      const steps = { width, height, steps: [{ goto: hash === null ? "http://127.0.0.1:" + port + "/#token=wrong-token" : base + hash },
                                             { wait: ready, timeout_ms: name === "whatif" ? 90000 : 20000 }, ...(more || []),
                                             { eval: "new Promise(r => setTimeout(r, 300))", as: "settle" }, { screenshot: file }] };
      const inFile = path.join(dir, "steps.json"), outFile = path.join(dir, "result.json");
      fs.writeFileSync(inFile, JSON.stringify(steps));
      try { execFileSync("node", [driver, opt.chromium, inFile, outFile], { stdio: "ignore" }); } catch (e) {}
      const r = JSON.parse(fs.readFileSync(outFile, "utf8"));
      console.log((r.error ? "FAILED " + r.error : "wrote") + " " + path.relative(process.cwd(), file));
    }
  }
  stopAll();
  await sleep(500);
  fs.rmSync(dir, { recursive: true, force: true });
}
main().catch(err => { console.error(err.stack || String(err)); console.error("(logs in " + dir + ")"); stopAll(); process.exit(1); });
