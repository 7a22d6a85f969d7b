// The dashboard's stylesheet: light and dark (prefers-color-scheme), readable at 1366x768,
// visible focus rings, the card map's bars and hatched idle holdings.
#include "api/dashboard/assets.h"

namespace tessera::api {

const char* DashboardCss() {
  return R"CSS(
:root { --bg: #fff; --fg: #1d2126; --muted: #5f6b7a; --line: #d9dee5; --panel: #f5f7fa; --accent: #2563eb;
  --bad: #b42318; --free: #eef1f5; --focus: #f59e0b; color-scheme: light dark; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #14171c; --fg: #e6e9ee; --muted: #9aa5b4; --line: #2c333d; --panel: #1c2128; --accent: #6ea8fe;
    --bad: #ff8a80; --free: #232a33; }
}
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: var(--fg); background: var(--bg); }
header { display: flex; align-items: center; gap: 1.2em; padding: .6em 1.2em; border-bottom: 1px solid var(--line);
  background: var(--panel); flex-wrap: wrap; }
h1 { font-size: 1.15em; margin: 0; }
h2 { font-size: 1.05em; margin: 0 0 .6em; }
h3 { font-size: .95em; margin: 1em 0 .4em; }
nav { display: flex; gap: .25em; flex-wrap: wrap; }
nav a { color: var(--fg); text-decoration: none; padding: .3em .7em; border-radius: 6px; border: 1px solid transparent; }
nav a:hover { border-color: var(--line); }
nav a[aria-current="page"] { background: var(--accent); color: #fff; }
a:focus-visible, button:focus-visible, select:focus-visible, input:focus-visible, summary:focus-visible {
  outline: 3px solid var(--focus); outline-offset: 2px; }
main { padding: 1em 1.2em; max-width: 1400px; }
section[hidden] { display: none; }
#error { color: var(--bad); margin: .4em 1.2em 0; min-height: 0; }
#error:empty { display: none; }
.muted, .note { color: var(--muted); }
.tiles { display: grid; grid-template-columns: repeat(auto-fill, minmax(10.5em, 1fr)); gap: .8em; }
.tile { border: 1px solid var(--line); border-radius: 8px; padding: .6em .9em; background: var(--panel); }
.tile b { display: block; font-size: 1.6em; font-variant-numeric: tabular-nums; }
.tile small { color: var(--muted); }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
th, td { padding: .3em .6em; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { font-weight: 600; color: var(--muted); font-size: .9em; }
td.num, th.num { text-align: right; }
tbody tr:hover { background: var(--panel); }
.filters { display: flex; gap: .8em; flex-wrap: wrap; align-items: end; margin-bottom: .8em; }
.filters label { display: flex; flex-direction: column; font-size: .85em; color: var(--muted); }
select, input, button { font: inherit; color: var(--fg); background: var(--bg); border: 1px solid var(--line);
  border-radius: 5px; padding: .25em .5em; }
button { cursor: pointer; background: var(--panel); }
button.link { border: 0; background: none; color: var(--accent); padding: 0; text-decoration: underline; }
.legend { display: flex; gap: 1em; flex-wrap: wrap; margin: .2em 0 .8em; font-size: .9em; }
.legend.inline { display: inline-flex; margin: 0; }
.legend span::before { content: ""; display: inline-block; width: .9em; height: .9em; margin-right: .35em;
  vertical-align: -.1em; border-radius: 2px; background: var(--c); }
.node { border: 1px solid var(--line); border-radius: 8px; padding: .6em .9em; margin-bottom: .8em; }
.node h3 { margin: 0 0 .5em; }
.device { display: grid; grid-template-columns: 11em 1fr 12em; gap: .8em; align-items: center; margin: .35em 0; }
.device .info { font-size: .85em; color: var(--muted); text-align: right; }
.bar { display: flex; height: 2.6em; border: 1px solid var(--line); border-radius: 5px; overflow: hidden; background: var(--free); }
.seg { position: relative; display: flex; align-items: center; gap: .3em; padding: 0 .35em; overflow: hidden; white-space: nowrap;
  font-size: .78em; color: #fff; background: var(--c, #888); border-right: 2px solid var(--bg); min-width: 3px;
  text-shadow: 0 0 2px rgba(0,0,0,.7); }
.seg.empty { background: transparent; color: var(--muted); text-shadow: none; border: 1px dashed var(--muted); }
.seg.idle { background: repeating-linear-gradient(45deg, var(--c, #888) 0 6px, rgba(0,0,0,.35) 6px 11px); }
.seg .label { overflow: hidden; text-overflow: ellipsis; min-width: 0; }
.seg .tag { flex: none; font-weight: 700; background: rgba(0,0,0,.6); padding: 0 .3em; border-radius: 3px; }
.chart { width: 100%; max-width: 1100px; height: auto; display: block; }
.chart text { fill: var(--muted); font-size: 11px; }
.chart .axis { stroke: var(--line); }
.chart .cap { stroke: var(--fg); stroke-dasharray: 4 3; fill: none; }
.chart .idle { stroke: var(--bad); stroke-dasharray: 2 2; fill: none; }
.panel { border: 1px solid var(--line); border-radius: 8px; padding: .7em 1em; margin-top: 1em; background: var(--panel); }
.scroll { max-height: 65vh; overflow: auto; }
.state-running { color: #15803d; } .state-pending { color: #b45309; } .state-failed { color: var(--bad); }
@media (prefers-color-scheme: dark) { .state-running { color: #4ade80; } .state-pending { color: #fbbf24; } }
)CSS";
}

}  // namespace tessera::api
