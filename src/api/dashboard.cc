// The dashboard: one self-contained page (no external scripts, styles or fonts; works offline)
// served at `/`. It reads the API with the user's token (passed once in the URL fragment, which
// never reaches the server, then kept in the browser's localStorage) and refreshes every 5 s.
// Views, one shown at a time and named in the fragment (#view=jobs&group=vision reproduces a
// filtered view): overview tiles, the card map (every device with its partitions and shares to
// scale, coloured by group, idle holdings hatched), utilization over time stacked by group,
// groups, jobs (filters; a job's wait reason and events), queues, the event log and the what-if
// report. The markup is here; the style and the script are in dashboard/.
#include <string>

#include "api/dashboard/assets.h"
#include "api/server.h"

namespace tessera::api {

namespace {

const char* kHead = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>Tessera</title>
<style>)HTML";

const char* kBody = R"HTML(</style>
</head>
<body>
<header>
  <h1>Tessera</h1>
  <nav aria-label="Views">
    <a href="#view=overview" data-view="overview">Overview</a>
    <a href="#view=cards" data-view="cards">Card map</a>
    <a href="#view=utilization" data-view="utilization">Utilization</a>
    <a href="#view=groups" data-view="groups">Groups</a>
    <a href="#view=jobs" data-view="jobs">Jobs</a>
    <a href="#view=queues" data-view="queues">Queues</a>
    <a href="#view=events" data-view="events">Events</a>
    <a href="#view=whatif" data-view="whatif">What-if</a>
  </nav>
  <span id="whoami" class="muted"></span>
</header>
<form id="login" hidden>
  <label>API token <input id="token" type="password" size="40" autocomplete="off"></label> <button>Show</button>
</form>
<p id="error" role="alert"></p>
<main>
<section id="view-overview" aria-labelledby="h-overview">
  <h2 id="h-overview">Overview</h2>
  <div class="tiles">
    <div class="tile">GPUs <b id="gpus-total">-</b><small>in ready nodes</small></div>
    <div class="tile">idle GPUs <b id="gpus-idle">-</b><small>not allocated</small></div>
    <div class="tile">held but idle <b id="gpus-held-idle">-</b><small>allocated, no activity</small></div>
    <div class="tile">CPUs <b id="cpus-total">-</b><small>idle: <span id="cpus-idle">-</span></small></div>
    <div class="tile">nodes <b id="nodes">-</b><small>ready</small></div>
    <div class="tile">workers <b id="workers">-</b><small>running jobs</small></div>
    <div class="tile">pending <b id="pending">-</b><small>waiting jobs</small></div>
  </div>
  <h3>Groups at a glance</h3>
  <table id="overview-groups"><thead><tr><th>group</th><th class="num">GPUs held</th><th class="num">held but idle</th>
  <th class="num">workers</th><th class="num">pending</th></tr></thead><tbody></tbody></table>
</section>
<section id="view-cards" aria-labelledby="h-cards" hidden>
  <h2 id="h-cards">Card map</h2>
  <p class="note">Each bar is one device, its width the device's memory: MIG/AMD partitions and shares drawn to
  scale, coloured by group; hatched holdings are held but idle.</p>
  <div id="legend" class="legend" aria-label="Groups"></div>
  <div id="cardmap"></div>
</section>
<section id="view-utilization" aria-labelledby="h-util" hidden>
  <h2 id="h-util">Utilization over time</h2>
  <div class="filters" role="group" aria-label="Range">
    <span class="muted">Range:</span>
    <button type="button" data-range="15m">15 min</button><button type="button" data-range="1h">1 h</button>
    <button type="button" data-range="6h">6 h</button><button type="button" data-range="24h">24 h</button>
    <button type="button" data-range="7d">7 d</button>
  </div>
  <div id="util-legend" class="legend"></div>
  <svg id="util" class="chart" viewBox="0 0 1000 300" role="img" aria-label="GPUs allocated by group over time"></svg>
  <p id="util-now" class="muted"></p>
</section>
<section id="view-groups" aria-labelledby="h-groups" hidden>
  <h2 id="h-groups">Groups</h2>
  <table id="groups"><thead><tr><th>group</th><th>parent</th><th class="num">reservation</th><th class="num">limit</th>
  <th class="num">held</th><th class="num">borrowed</th><th class="num">held but idle</th><th class="num" title="dominant share of decayed usage over weight: the lower, the sooner served">fair share</th>
  <th class="num">weight</th><th class="num">pending</th><th>why pending</th></tr></thead><tbody></tbody></table>
  <p class="note">GPU counts; borrowed is what a group holds beyond its reservation; fair share is the group's
  dominant share of decayed usage over its weight (the lower, the sooner served).</p>
</section>
<section id="view-jobs" aria-labelledby="h-jobs" hidden>
  <h2 id="h-jobs">Jobs</h2>
  <div class="filters">
    <label>state <select id="f-state" data-filter="state"></select></label>
    <label>queue <select id="f-queue" data-filter="queue"></select></label>
    <label>group <select id="f-group" data-filter="group"></select></label>
    <label>identity <select id="f-identity" data-filter="identity"></select></label>
    <span id="jobs-count" class="muted"></span>
  </div>
  <div class="scroll"><table id="jobs"><thead><tr><th>job</th><th>state</th><th>queue</th><th>group</th><th>identity</th>
  <th>form</th><th>node</th><th>activity</th><th>wait / reason</th></tr></thead><tbody></tbody></table></div>
  <div id="job-detail" class="panel" hidden tabindex="-1"></div>
</section>
<section id="view-queues" aria-labelledby="h-queues" hidden>
  <h2 id="h-queues">Queues</h2>
  <table id="queues"><thead><tr><th>queue</th><th>groups</th><th>class</th><th>forms</th><th class="num">priority</th>
  <th>preemptible</th><th>profile</th><th class="num">GPUs</th><th class="num">GPU memory</th><th>backend</th>
  <th class="num">pending</th><th class="num">running</th></tr></thead><tbody></tbody></table>
</section>
<section id="view-events" aria-labelledby="h-events" hidden>
  <h2 id="h-events">Events</h2>
  <div class="filters"><label>kind (prefix) <input id="f-kind" list="kinds" placeholder="e.g. job. or node."></label>
  <datalist id="kinds"><option value="job."><option value="job.idle"><option value="job.preempted"><option value="node.">
  </datalist></div>
  <div class="scroll"><table id="events"><thead><tr><th>time</th><th>kind</th><th>subject</th><th>actor</th><th>reason</th></tr></thead>
  <tbody></tbody></table></div>
</section>
<section id="view-whatif" aria-labelledby="h-whatif" hidden>
  <h2 id="h-whatif">What-if</h2>
  <p class="note">Replays the observed jobs through the simulator with other forms for a class: cards needed,
  returned and wait percentiles beside what happened.</p>
  <form id="whatif-form" class="filters">
    <label>window <select id="w-since"><option value="1h">1 h</option><option value="24h">24 h</option>
      <option value="7d" selected>7 d</option><option value="30d">30 d</option></select></label>
    <label>class <input id="w-class" value="interactive" size="12"></label>
    <label>forms <input id="w-forms" value="share" size="18"></label>
    <button>Run</button>
  </form>
  <p id="whatif-note" class="note"></p>
  <table id="whatif"><thead><tr><th>class</th><th class="num">jobs</th><th class="num">observed cards</th>
  <th class="num">as configured</th><th class="num">what-if</th><th class="num">returned</th><th class="num">wait p99 observed</th>
  <th class="num">as configured</th><th class="num">what-if</th></tr></thead><tbody></tbody></table>
</section>
</main>
<script>)HTML";

const char* kTail = R"HTML(</script>
</body>
</html>
)HTML";

}  // namespace

const char* DashboardHtml() {
  static const std::string page =
      std::string(kHead) + DashboardCss() + kBody + DashboardJs() + kTail;
  return page.c_str();
}

}  // namespace tessera::api
