// Drives headless Chromium through the DevTools protocol over a pipe (--remote-debugging-pipe:
// fd 3 to Chromium, fd 4 from it, NUL-terminated JSON), so that a test can act as a person does:
// open a page, wait for something to show, click, type, and read what the page shows.
//
//   node dashboard_browser.js CHROMIUM STEPS.json RESULT.json
//
// STEPS.json: {"width": 1366, "height": 900, "steps": [...]}, each step one of
//   {"goto": URL}                          open URL and wait for its load event
//   {"wait": EXPR, "timeout_ms": N}        evaluate EXPR in the page until it is truthy (10 s default)
//   {"click": SELECTOR}                    click the first element SELECTOR matches (it must exist)
//   {"type": SELECTOR, "text": TEXT}       set an input's value and fire its input and change events
//   {"eval": EXPR, "as": NAME}             keep EXPR's value (JSON) as results[NAME]
//   {"screenshot": FILE}                   a PNG of the viewport ("full": true: of the whole page)
//   {"touch": FILE}                        create FILE (a test waiting for it then acts: submits a job)
//   {"axe": AXE_MIN_JS, "as": NAME}        inject axe-core (its axe.min.js) and keep, as results[NAME],
//                                          its serious and critical violations on the page as it is
//                                          now: [{id, impact, help, targets: [selector...]}]
// RESULT.json: {"results": {...}, "error": "the step that failed and why" or "", "console": [...]}
// (console: every console message and uncaught exception). Exits 0 when every step passed.
"use strict";
const { spawn } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");

const [chromium, stepsFile, resultFile] = process.argv.slice(2);
const plan = JSON.parse(fs.readFileSync(stepsFile, "utf8"));
const out = { results: {}, error: "", console: [] };
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "tessera-chromium-"));
const browser = spawn(chromium, ["--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                                 "--no-first-run", "--user-data-dir=" + profile,
                                 "--window-size=" + (plan.width || 1366) + "," + (plan.height || 900), "about:blank"],
                      { stdio: ["ignore", "ignore", "ignore", "pipe", "pipe"] });
const toBrowser = browser.stdio[3], fromBrowser = browser.stdio[4];

let nextId = 1;
const waiting = new Map();  // id -> {resolve, reject}
const listeners = [];       // (method, params, sessionId) => void
let buffer = "";
fromBrowser.on("data", chunk => {
  buffer += chunk.toString("utf8");
  let end;
  while ((end = buffer.indexOf("\0")) >= 0) {
    const msg = JSON.parse(buffer.slice(0, end));
    buffer = buffer.slice(end + 1);
    if (msg.id && waiting.has(msg.id)) {
      const w = waiting.get(msg.id);
      waiting.delete(msg.id);
      if (msg.error) w.reject(new Error(msg.error.message)); else w.resolve(msg.result);
    } else if (msg.method) {
      for (const l of listeners) l(msg.method, msg.params, msg.sessionId);
    }
  }
});
function send(method, params, sessionId) {
  const id = nextId++;
  const msg = { id, method, params: params || {} };
  if (sessionId) msg.sessionId = sessionId;
  toBrowser.write(JSON.stringify(msg) + "\0");
  return new Promise((resolve, reject) => waiting.set(id, { resolve, reject }));
}
const sleep = ms => new Promise(r => setTimeout(r, ms));

async function main() {
  const { targetInfos } = await send("Target.getTargets");
  const page = targetInfos.find(t => t.type === "page");
  const { sessionId } = await send("Target.attachToTarget", { targetId: page.targetId, flatten: true });
  const s = (method, params) => send(method, params, sessionId);
  let loaded = null;
  listeners.push((method, params, sid) => {
    if (sid !== sessionId) return;
    if (method === "Page.loadEventFired" && loaded) { loaded(); loaded = null; }
    if (method === "Runtime.consoleAPICalled") {
      out.console.push(params.type + ": " + params.args.map(a => a.value !== undefined ? String(a.value) : a.description || a.type).join(" "));
    }
    if (method === "Runtime.exceptionThrown") {
      const d = params.exceptionDetails;
      out.console.push("uncaught: " + (d.exception && d.exception.description || d.text));
    }
  });
  await s("Page.enable");
  await s("Runtime.enable");
  const evaluate = async expr => {
    const r = await s("Runtime.evaluate", { expression: expr, awaitPromise: true, returnByValue: true });
    if (r.exceptionDetails) throw new Error("in the page: " + (r.exceptionDetails.exception && r.exceptionDetails.exception.description || r.exceptionDetails.text));
    return r.result.value;
  };
  for (const [i, step] of plan.steps.entries()) {
    const what = "step " + i + " " + JSON.stringify(step);
    try {
      if (step.goto !== undefined) {
        const done = new Promise(r => { loaded = r; });
        await s("Page.navigate", { url: step.goto });
        await Promise.race([done, sleep(10000)]);
      } else if (step.wait !== undefined) {
        const until = Date.now() + (step.timeout_ms || 10000);
        let ok = false;
        while (!ok && Date.now() < until) {
          ok = await evaluate("Boolean(" + step.wait + ")").catch(() => false);
          if (!ok) await sleep(100);
        }
        if (!ok) throw new Error("timed out waiting");
      } else if (step.click !== undefined) {
        const ok = await evaluate("(() => { const e = document.querySelector(" + JSON.stringify(step.click) + "); if (!e) return false; e.click(); return true; })()");
        if (!ok) throw new Error("nothing to click");
      } else if (step.type !== undefined) {
        const ok = await evaluate("(() => { const e = document.querySelector(" + JSON.stringify(step.type) + "); if (!e) return false; e.focus(); e.value = " +
                                  JSON.stringify(step.text) + "; e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true})); return true; })()");
        if (!ok) throw new Error("nothing to type into");
      } else if (step.eval !== undefined) {
        out.results[step.as] = await evaluate(step.eval);
      } else if (step.touch !== undefined) {
        fs.writeFileSync(step.touch, "");
      } else if (step.axe !== undefined) {
        if (!(await evaluate("typeof axe !== 'undefined'"))) await evaluate(fs.readFileSync(step.axe, "utf8"));
        out.results[step.as] = await evaluate(
            "axe.run(document, { resultTypes: ['violations'] }).then(r => r.violations.filter(v => v.impact === 'serious' || " +
            "v.impact === 'critical').map(v => ({ id: v.id, impact: v.impact, help: v.help, targets: v.nodes.slice(0, 5).map(n => " +
            "n.target.join(' ') + ' ' + (n.failureSummary || '').replace(/\\s+/g, ' ').slice(0, 160)) })))");
      } else if (step.screenshot !== undefined) {
        const shot = { format: "png" };
        if (step.full) {
          const m = await s("Page.getLayoutMetrics");
          const c = m.cssContentSize || m.contentSize;
          shot.captureBeyondViewport = true;
          shot.clip = { x: 0, y: 0, width: Math.ceil(c.width), height: Math.min(Math.ceil(c.height), 12000), scale: 1 };
        }
        const { data } = await s("Page.captureScreenshot", shot);
        fs.writeFileSync(step.screenshot, Buffer.from(data, "base64"));
      } else {
        throw new Error("unknown step");
      }
    } catch (err) {
      out.error = what + ": " + err.message;
      break;
    }
  }
}

const deadline = setTimeout(() => { out.error = out.error || "the browser run took over 120 s"; finish(); }, 120000);
function finish() {
  clearTimeout(deadline);
  fs.writeFileSync(resultFile, JSON.stringify(out, null, 1));
  try { browser.kill("SIGKILL"); } catch (e) {}
  try { fs.rmSync(profile, { recursive: true, force: true }); } catch (e) {}
  process.exit(out.error ? 1 : 0);
}
browser.on("exit", code => { if (!out.error && waiting.size) out.error = "chromium exited (" + code + ")"; });
main().catch(err => { out.error = out.error || String(err && err.stack || err); }).finally(finish);
