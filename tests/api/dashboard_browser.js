// Drives headless Chromium (Debian's, not a downloaded one) through puppeteer-core (npm,
// tests/api/dashboard_axe, installed as locked by scripts/setup.sh), so that a test can act as a
// person does: open a page, wait for something to show, click it (a real mouse click at the
// element, scrolled into view), type (real key presses), and read what the page shows.
//
//   node dashboard_browser.js CHROMIUM STEPS.json RESULT.json
//
// STEPS.json: {"width": 1366, "height": 900, "steps": [...]}, each step one of
//   {"goto": URL}                          open URL and wait for its load event (10 s at most)
//   {"wait": EXPR, "timeout_ms": N}        evaluate EXPR in the page until it is truthy (10 s default;
//                                          an EXPR that throws counts as not yet)
//   {"click": SELECTOR}                    click the first element SELECTOR matches (it must exist)
//   {"type": SELECTOR, "text": TEXT}       a <select>: choose the option TEXT; another input: clear it,
//                                          type TEXT key by key, then commit it (its change event)
//   {"upload": SELECTOR, "file": PATH}     choose PATH in the file input SELECTOR
//   {"eval": EXPR, "as": NAME}             keep EXPR's value (JSON; a promise is awaited) as results[NAME]
//   {"screenshot": FILE}                   a PNG of the viewport ("full": true: of the whole page)
//   {"touch": FILE}                        create FILE (a test waiting for it then acts: submits a job)
//   {"axe": AXE_MIN_JS, "as": NAME}        inject axe-core (its axe.min.js) and keep, as results[NAME],
//                                          its serious and critical violations on the page as it is
//                                          now: [{id, impact, help, targets: [selector...]}]
// RESULT.json: {"results": {...}, "error": "the step that failed and why" or "", "console": [...]}
// (console: every console message of the page's scripts and every uncaught exception). Exits 0 when
// every step passed.
"use strict";
const fs = require("fs");
const path = require("path");

const [chromium, stepsFile, resultFile] = process.argv.slice(2);
const plan = JSON.parse(fs.readFileSync(stepsFile, "utf8"));
const out = { results: {}, error: "", console: [] };

let puppeteer;
try {
  puppeteer = require(path.join(__dirname, "dashboard_axe", "node_modules", "puppeteer-core"));
} catch (err) {
  out.error = "puppeteer-core is not installed in tests/api/dashboard_axe: run scripts/setup.sh (" + err.message + ")";
  fs.writeFileSync(resultFile, JSON.stringify(out, null, 1));
  process.exit(1);
}

let browser = null;
async function main() {
  const width = plan.width || 1366, height = plan.height || 900;
  browser = await puppeteer.launch({
    executablePath: chromium, headless: true, pipe: true, defaultViewport: { width, height },
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--window-size=" + width + "," + height],
  });
  const page = (await browser.pages())[0] || await browser.newPage();
  // What the page's own scripts log and what they throw, read from the page's DevTools session as
  // the test expects it: puppeteer's own 'console' event also carries the browser's network log
  // ("Failed to load resource: 401"), which is the server's answer, not the page's message.
  const cdp = await page.createCDPSession();
  cdp.on("Runtime.consoleAPICalled", p => {
    out.console.push(p.type + ": " + p.args.map(a => a.value !== undefined ? String(a.value) : a.description || a.type).join(" "));
  });
  cdp.on("Runtime.exceptionThrown", p => {
    const d = p.exceptionDetails;
    out.console.push("uncaught: " + (d.exception && d.exception.description || d.text));
  });
  await cdp.send("Runtime.enable");
  const element = async (selector, what) => {
    const e = await page.$(selector);
    if (!e) throw new Error(what);
    return e;
  };
  for (const [i, step] of plan.steps.entries()) {
    const what = "step " + i + " " + JSON.stringify(step);
    try {
      if (step.goto !== undefined) {
        await page.goto(step.goto, { waitUntil: "load", timeout: 10000 }).catch(err => {
          if (!(err instanceof puppeteer.TimeoutError)) throw err;
        });
      } else if (step.wait !== undefined) {
        await page.waitForFunction("(() => { try { return Boolean(" + step.wait + "); } catch (e) { return false; } })()",
                                   { timeout: step.timeout_ms || 10000, polling: 100 })
            .catch(err => { throw err instanceof puppeteer.TimeoutError ? new Error("timed out waiting") : err; });
      } else if (step.click !== undefined) {
        // A live view may redraw the element between finding it and clicking it: find it again
        // (for 2 s) as a person would click what is there now.
        for (let tries = 0; ; ++tries) {
          const e = await element(step.click, "nothing to click");
          try {
            await e.click();
            break;
          } catch (err) {
            if (tries >= 20 || !/detached|not clickable|not visible/i.test(err.message)) throw err;
            await new Promise(r => setTimeout(r, 100));
          }
        }
      } else if (step.type !== undefined) {
        const e = await element(step.type, "nothing to type into");
        if (await e.evaluate(x => x.tagName === "SELECT")) {
          const chosen = await page.select(step.type, step.text);
          if (!chosen.length) throw new Error("no option '" + step.text + "' to choose");
        } else {
          await e.evaluate(x => { x.focus(); x.select && x.select(); });
          await page.keyboard.press("Backspace");
          await e.type(step.text);
          await e.evaluate(x => x.dispatchEvent(new Event("change", { bubbles: true })));
        }
      } else if (step.upload !== undefined) {
        const e = await element(step.upload, "no file input");
        await e.uploadFile(step.file);
      } else if (step.eval !== undefined) {
        out.results[step.as] = await page.evaluate(step.eval);
      } else if (step.touch !== undefined) {
        fs.writeFileSync(step.touch, "");
      } else if (step.axe !== undefined) {
        if (!(await page.evaluate("typeof axe !== 'undefined'"))) await page.evaluate(fs.readFileSync(step.axe, "utf8"));
        out.results[step.as] = await page.evaluate(
            "axe.run(document, { resultTypes: ['violations'] }).then(r => r.violations.filter(v => v.impact === 'serious' || " +
            "v.impact === 'critical').map(v => ({ id: v.id, impact: v.impact, help: v.help, targets: v.nodes.slice(0, 5).map(n => " +
            "n.target.join(' ') + ' ' + (n.failureSummary || '').replace(/\\s+/g, ' ').slice(0, 160)) })))");
      } else if (step.screenshot !== undefined) {
        const shot = { path: step.screenshot, type: "png" };
        if (step.full) {
          const size = await page.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]");
          shot.captureBeyondViewport = true;
          shot.clip = { x: 0, y: 0, width: size[0], height: Math.min(size[1], 12000) };
        }
        await page.screenshot(shot);
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
let finished = false;
async function finish() {
  if (finished) return;
  finished = true;
  clearTimeout(deadline);
  fs.writeFileSync(resultFile, JSON.stringify(out, null, 1));
  if (browser) {
    // close() removes the profile puppeteer made; a browser that does not close in 5 s is killed.
    const proc = browser.process();
    await Promise.race([browser.close().catch(() => {}), new Promise(r => setTimeout(r, 5000))]);
    try { if (proc && proc.exitCode === null) proc.kill("SIGKILL"); } catch (e) {}
  }
  process.exit(out.error ? 1 : 0);
}
main().catch(err => { out.error = out.error || String(err && err.stack || err); }).finally(finish);
