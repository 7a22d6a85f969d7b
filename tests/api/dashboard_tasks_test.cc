// The dashboard as a person uses it, in a real headless Chromium driven by puppeteer-core
// (tests/api/dashboard_browser.js: open, wait, click, type, read; the fixture in
// dashboard_tasks.h) against a real `tessera serve` and simulated agents: two groups are drawn in
// two different colour-blind-safe colours, the same on every view; the jobs table shows a
// submitted job's name and sorts by a column, fifty a page; a job is cancelled from its page
// (asked to confirm, the server's answer shown, the API then says cancelled); a wrong token shows
// the sign-in box, not the server's JSON; the card map of 40 nodes shows one page of them, pages
// on, and finds one node by name. No console message. More tasks in dashboard_tasks_more_test.cc.
#include "dashboard_tasks.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::Click;
using testing::DashboardTasksTest;
using testing::Eval;
using testing::Goto;
using testing::kOkabeIto;
using testing::kRowIds;
using testing::Type;
using testing::Wait;

TEST_F(DashboardTasksTest, TwoGroupsAreDrawnInDistinctColourBlindSafeColoursOnEveryView) {
  StartAgents(1, "2xA100-80GB");
  const std::string v = Submit("vision-token-1", "vee-notebook");
  const std::string s = Submit("speech-token-1", "sam-notebook");
  ASSERT_TRUE(WaitFor([&] { return AdminState(v) == "running" && AdminState(s) == "running"; }))
      << Call("GET", "/v1/jobs", {}, "admin-token-1").dump();
  // Wait for a utilization sample holding both groups, so the overview's chart draws both.
  ASSERT_TRUE(WaitFor([&] {
    Json u = Call("GET", "/v1/utilization?by=group&since=0", {}, "admin-token-1");
    if (!u.is_object() || u["samples"].empty()) return false;
    const Json& by = u["samples"].back()["by"];
    return by.is_object() && by.contains("vision") && by.contains("speech");
  }));
  const std::string colours =
      "Object.fromEntries(['vision', 'speech'].map(g => [g, [...document.querySelectorAll("
      "'[data-group=\"' + g + '\"][data-colour]')].filter(e => e.offsetParent).map(e => "
      "e.dataset.colour)]))";
  const std::string fill =
      "Object.fromEntries(['vision', 'speech'].map(g => [g, "
      "(st => st.backgroundColor + ' ' + st.backgroundImage)(getComputedStyle("
      "document.querySelector('.seg[data-group=\"' + g + '\"]')))]))";
  Json r = Browse({
      Goto(Url("token=admin-token-1")),
      Wait("document.querySelectorAll('#ov-util path[data-group]').length == 2"),
      Eval(colours, "overview"),
      Eval("[...document.querySelectorAll('#ov-util path[data-group]')].map(p => "
           "[p.dataset.group, p.getAttribute('fill')])",
           "chart"),
      Eval("[...document.querySelectorAll('.tile b')].map(b => b.textContent)", "tiles"),
      Click("nav a[data-view=cards]"),
      Wait("document.querySelector('.seg[data-group=speech]') && "
           "document.querySelector('.seg[data-group=vision]')"),
      Eval(colours, "cards"),
      Eval(fill, "fill"),
      Click("nav a[data-view=jobs]"),
      Wait("document.querySelector('#jobs tbody tr[data-job]')"),
      Eval(colours, "jobs"),
  });
  ASSERT_TRUE(r.contains("jobs")) << r.dump(1);
  // One colour per group on each view, the same on every view, from the palette, and distinct.
  std::string vision, speech;
  for (const char* view : {"overview", "cards", "jobs"}) {
    for (const auto& [group, colour] :
         {std::pair{"vision", &vision}, std::pair{"speech", &speech}}) {
      const Json& seen = r[view][group];
      ASSERT_FALSE(seen.empty()) << view << ": no visible " << group << "\n" << r.dump(1);
      for (const auto& c : seen) {
        if (colour->empty()) *colour = c;
        EXPECT_EQ(c, *colour) << view << ": " << group << " changes colour\n" << r.dump(1);
      }
    }
  }
  EXPECT_NE(vision, speech) << "both groups are drawn in one colour";
  EXPECT_TRUE(kOkabeIto.count(vision)) << vision;
  EXPECT_TRUE(kOkabeIto.count(speech)) << speech;
  for (const auto& p : r["chart"]) {
    EXPECT_EQ(p[1], p[0] == "vision" ? vision : speech) << r["chart"].dump();
  }
  // What is painted (a colour, or hatching of it for an idle holding) differs too.
  EXPECT_NE(r["fill"]["vision"], r["fill"]["speech"]) << r["fill"].dump();
  // Numbers for people: at most one decimal, no raw fractions such as 0.858.
  const std::regex human(R"(^(-|<0\.1|\d+(\.\d)?( GiB)?)$)");
  for (const auto& t : r["tiles"]) {
    EXPECT_TRUE(std::regex_match(t.get<std::string>(), human)) << t << " in " << r["tiles"].dump();
  }
}

TEST_F(DashboardTasksTest, TheJobsTableShowsASubmittedJobsNameAndSortsByAColumn) {
  StartAgents(1, "2xA100-80GB");
  const std::string c = Submit("vision-token-1", "charlie-eval");
  const std::string a = Submit("vision-token-1", "alpha-train");
  const std::string b = Submit("speech-token-1", "bravo-notebook");
  Json r = Browse({
      Goto(Url("token=admin-token-1&view=jobs")),
      Wait("document.querySelectorAll('#jobs tbody tr[data-job]').length == 3"),
      Eval("document.querySelector('#jobs tbody tr[data-job=\"" + c + "\"]').cells[0].textContent",
           "name"),
      Eval(kRowIds, "newest_first"),
      Click("#jobs th[data-sort=name] button"),
      Eval(kRowIds, "by_name"),
      Eval("document.querySelector('#jobs th[data-sort=name]').getAttribute('aria-sort')", "aria"),
      Click("#jobs th[data-sort=name] button"),
      Eval(kRowIds, "by_name_desc"),
      Eval("location.hash", "hash"),
      Type("#f-group", "speech"),
      Eval(kRowIds, "speech_only"),
  });
  EXPECT_NE(r.value("name", "").find("charlie-eval"), std::string::npos) << r.dump(1);
  EXPECT_EQ(r["newest_first"], Json({b, a, c})) << r.dump(1);
  EXPECT_EQ(r["by_name"], Json({a, b, c})) << r.dump(1);
  EXPECT_EQ(r["aria"], "ascending");
  EXPECT_EQ(r["by_name_desc"], Json({c, b, a})) << r.dump(1);
  EXPECT_NE(r.value("hash", "").find("sort=name"), std::string::npos) << r.dump(1);
  EXPECT_EQ(r["speech_only"], Json({b})) << r.dump(1);
}

TEST_F(DashboardTasksTest, TheJobsTableShowsFiftyAPageAndPagesOn) {
  // No agent: 55 jobs wait.
  std::vector<std::string> ids;
  for (int i = 0; i < 55; ++i) ids.push_back(Submit("speech-token-1", "job-" + std::to_string(i)));
  const std::string pager = "document.querySelector('#jobs-pager')";
  Json r = Browse({
      Goto(Url("token=admin-token-1&view=jobs")),
      Wait("document.querySelectorAll('#jobs tbody tr[data-job]').length > 0"),
      Eval(kRowIds, "first"),
      Eval(pager + ".dataset.pages", "pages"),
      Click("#jobs-pager button[aria-label='next page']"),
      Eval(kRowIds, "second"),
      Eval("document.querySelector('#jobs-count').textContent", "count"),
  });
  ASSERT_TRUE(r.contains("second")) << r.dump(1);
  EXPECT_EQ(r["first"].size(), 50u) << r.dump(1);
  EXPECT_EQ(r["first"][0], ids.back()) << "newest first";
  EXPECT_EQ(r["pages"], "2");
  EXPECT_EQ(r["second"], Json({ids[4], ids[3], ids[2], ids[1], ids[0]})) << r.dump(1);
  EXPECT_NE(r.value("count", "").find("55 of 55 jobs"), std::string::npos) << r.dump(1);
}

TEST_F(DashboardTasksTest, AJobIsCancelledFromItsPageAfterAConfirmation) {
  StartAgents(1, "2xA100-80GB");
  const std::string id = Submit("vision-token-1", "long-sleeper",
                                {"sh", "-c", "echo started-and-waiting; sleep 1000"});
  ASSERT_TRUE(WaitFor([&] { return AdminState(id) == "running"; })) << AdminJob(id).dump();
  const std::string answer = "document.querySelector('#cancel-answer')";
  // Another member of the group sees the job's page but no Cancel (only its owner and admins).
  Json r = Browse({
      Goto(Url("token=vision-token-2&view=jobs&job=" + id)),
      Wait("document.querySelector('[data-job-state]') && "
           "/started-and-waiting/.test(document.querySelector('#job-output').textContent)"),
      Eval("document.querySelector('#cancel-job') == null", "no_cancel"),
      Eval("(document.querySelector('[data-isolation]') || {}).textContent", "isolation"),
  });
  EXPECT_EQ(r["no_cancel"], true) << "a member who may not cancel the job is offered Cancel";
  // The grant's isolation grade (issue 38), as the API gives it.
  const std::string grade = AdminJob(id)["placement"].value("isolation", "");
  ASSERT_FALSE(grade.empty()) << AdminJob(id).dump();
  EXPECT_EQ(r.value("isolation", ""), grade) << r.dump(1);
  r = Browse({
      Goto(Url("token=vision-token-1&view=jobs")),
      Wait("document.querySelector('[data-open=\"" + id + "\"]')"),
      Click("[data-open=\"" + id + "\"]"),  // the job's page
      Wait("/started-and-waiting/.test(document.querySelector('#job-output').textContent)"),
      Eval("document.querySelector('[data-command]').textContent", "command"),
      Click("#cancel-job"),
      Eval("document.querySelector('#confirm').open", "asked"),
      Eval("document.querySelector('#confirm-text').textContent", "question"),
  });
  EXPECT_EQ(r["command"], "sh -c 'echo started-and-waiting; sleep 1000'") << r.dump(1);
  EXPECT_EQ(r["asked"], true) << "no confirmation was asked for";
  EXPECT_NE(r.value("question", "").find(id), std::string::npos) << r.dump(1);
  // Only asked: nothing was cancelled yet.
  EXPECT_EQ(AdminState(id), "running");
  EXPECT_EQ(AdminJob(id).value("reason", ""), "");

  r = Browse({
      // From the overview: Jobs, the job (two clicks), then Cancel and its confirmation.
      Goto(Url("token=vision-token-1")),
      Wait("document.querySelector('#gpus-total').textContent != '-'"),
      Click("nav a[data-view=jobs]"),
      Wait("document.querySelector('[data-open=\"" + id + "\"]')"),
      Click("[data-open=\"" + id + "\"]"),
      Wait("document.querySelector('#cancel-job')"),
      Click("#cancel-job"),
      Click("#confirm-yes"),
      Wait(answer + " && /server/.test(" + answer + ".textContent)"),
      Eval(answer + ".textContent", "answer"),
      Wait("document.querySelector('#job-detail').dataset.state == 'cancelled' && "
           "!document.querySelector('#cancel-job')",
           20000),
      Eval("document.querySelector('[data-job-state]').textContent", "badge"),
  });
  EXPECT_NE(r.value("answer", "").find("The server accepted the cancel"), std::string::npos)
      << r.dump(1);
  EXPECT_EQ(r["badge"], "cancelled") << r.dump(1);
  EXPECT_EQ(AdminState(id), "cancelled") << AdminJob(id).dump();
}

TEST_F(DashboardTasksTest, AWrongTokenShowsTheSignInBoxNotJson) {
  Json r = Browse({
      Goto(Url("token=not-a-token")),
      Wait("!document.querySelector('#login').hidden"),
      Eval("document.querySelector('#login-why').textContent", "why"),
      Eval("document.body.innerText", "text"),
      Eval("document.querySelector('main').hidden", "main_hidden"),
      Eval("document.querySelector('label[for=token]') != null", "label"),
      // Signing in with the right token shows the cluster.
      Type("#token", "admin-token-1"),
      Click("#login button"),
      Wait("document.querySelector('#login').hidden && /^\\d/.test("
           "document.querySelector('#gpus-total').textContent)"),
      Eval("document.querySelector('#whoami').textContent", "who"),
  });
  EXPECT_NE(r.value("why", "").find("not accepted"), std::string::npos) << r.dump(1);
  EXPECT_EQ(r.value("text", "").find("{\""), std::string::npos) << "raw JSON shown: " << r["text"];
  EXPECT_EQ(r.value("text", "").find("401"), std::string::npos) << r["text"];
  EXPECT_EQ(r["main_hidden"], true);
  EXPECT_EQ(r["label"], true);
  EXPECT_NE(r.value("who", "").find("admin"), std::string::npos) << r.dump(1);
}

TEST_F(DashboardTasksTest, TheCardMapOfFortyNodesShowsOnePageAndFindsANode) {
  StartAgents(40, "1xH100-80GB");
  const std::string nodes =
      "[...document.querySelectorAll('#cardmap .node')].map(n => n.dataset.node)";
  Json r = Browse({
      Goto(Url("token=admin-token-1&view=cards")),
      Wait("document.querySelectorAll('#cardmap .node').length > 0"),
      Eval(nodes, "first"),
      Eval("document.querySelectorAll('#cardmap .device').length", "devices"),
      Eval("document.querySelector('#cards-count').textContent", "count"),
      Click("#cards-pager button[aria-label='next page']"),
      Eval(nodes, "second"),
      Type("#f-node", "node-33"),
      Eval(nodes, "found"),
  });
  ASSERT_TRUE(r.contains("found")) << r.dump(1);
  std::vector<std::string> first, second;
  for (int i = 1; i <= 10; ++i) first.push_back("node-" + std::to_string(i));
  for (int i = 11; i <= 20; ++i) second.push_back("node-" + std::to_string(i));
  EXPECT_EQ(r["first"], Json(first)) << r.dump(1);
  EXPECT_EQ(r["devices"], 10) << "one page of ten nodes, not all forty";
  EXPECT_NE(r.value("count", "").find("of 40"), std::string::npos) << r.dump(1);
  EXPECT_EQ(r["second"], Json(second)) << r.dump(1);
  EXPECT_EQ(r["found"], Json({"node-33"})) << r.dump(1);
}

// A person opens Nodes (one click from the overview): every device is one square of a heat map,
// grouped per node, coloured by how full it is, held but idle or free, with a legend; choosing a
// node (the second click) opens that node's card map, which shows whose share is on which card.
TEST_F(DashboardTasksTest, TheNodesHeatMapShowsEveryDeviceAndOpensANodesCardMap) {
  StartAgents(3, "2xA100-80GB");
  const std::string v = Submit("vision-token-1", "vee-notebook");
  ASSERT_TRUE(WaitFor([&] { return AdminState(v) == "running"; })) << AdminJob(v).dump();
  const std::string node = AdminJob(v)["placement"]["node"];
  // The share is held but idle once idle_after (2 s) passed without activity (it sleeps).
  ASSERT_TRUE(WaitFor([&] { return HeldButIdle(v); })) << AdminJob(v).dump();
  const std::string tile = "#heatmap a[data-node=\"" + node + "\"]";
  Json r = Browse({
      Goto(Url("token=admin-token-1")),
      Wait("document.querySelector('#gpus-total').textContent != '-'"),
      Click("nav a[data-view=nodes]"),
      Wait("document.querySelector('#heatmap').dataset.devices == '6' && document.querySelector('" +
           tile + " i.h-idle')"),
      Eval("[...document.querySelectorAll('#heatmap a.hn')].map(a => [a.dataset.node, "
           "[...a.querySelectorAll('i')].map(i => i.className)])",
           "tiles"),
      Eval("document.querySelector('" + tile + "').getAttribute('aria-label')", "label"),
      Eval("document.querySelector('" + tile + " i.h-idle').title", "cell"),
      Eval("[...document.querySelectorAll('#heat-legend [data-heat]')].map(s => [s.dataset.heat, "
           "s.textContent, s.dataset.count])",
           "legend"),
      Eval("document.querySelector('#heat-count').textContent", "count"),
      Click(tile),
      Wait("location.hash.includes('view=cards') && "
           "document.querySelectorAll('#cardmap .node').length == 1"),
      Eval("[...document.querySelectorAll('#cardmap .node')].map(n => n.dataset.node)",
           "card_nodes"),
      Eval("[...document.querySelectorAll('#cardmap .seg[data-job]')].map(s => [s.dataset.job, "
           "s.dataset.group, s.dataset.identity, s.dataset.idle])",
           "segs"),
  });
  ASSERT_TRUE(r.contains("segs")) << r.dump(1);
  ASSERT_EQ(r["tiles"].size(), 3u) << r.dump(1);
  int idle = 0, free = 0;
  for (const auto& t : r["tiles"]) {
    EXPECT_EQ(t[1].size(), 2u) << "two squares for two devices: " << t.dump();
    for (const auto& c : t[1]) {
      idle += c == "h-idle";
      free += c == "h-free";
    }
  }
  EXPECT_EQ(idle, 1) << r["tiles"].dump();
  EXPECT_EQ(free, 5) << r["tiles"].dump();
  EXPECT_EQ(r["label"], node + ": 2 devices, 1 free, 1 held but idle") << r.dump(1);
  EXPECT_NE(r.value("cell", "").find("0.1 GPU held by vision, idle"), std::string::npos)
      << r.dump(1);
  EXPECT_EQ(r["legend"][0], Json({"free", "free", "5"})) << r["legend"].dump();
  EXPECT_EQ(r["legend"][3], Json({"idle", "held but idle", "1"})) << r["legend"].dump();
  EXPECT_EQ(r["count"],
            "6 devices on 3 nodes: 5 free, 0 partly held, 0 fully held, 1 held but idle, "
            "0 unavailable.")
      << r.dump(1);
  EXPECT_EQ(r["card_nodes"], Json({node})) << r.dump(1);
  EXPECT_EQ(r["segs"], Json({Json({v, "vision", "vee", "true"})})) << r.dump(1);
}

// Which team holds idle GPUs now, and how many, in which form: on the overview (no click), the
// table of what each group holds and how much of it is idle, and one chart per group over the
// last hour, in use solid and held but idle hatched.
TEST_F(DashboardTasksTest, TheOverviewSaysWhichGroupHoldsIdleGpusInWhichForm) {
  StartAgents(1, "2xA100-80GB");
  const std::string v = Submit("vision-token-1", "vee-notebook");
  const std::string s = Submit("speech-token-1", "sam-train", {"sleep", "1000"}, "training");
  ASSERT_TRUE(WaitFor([&] { return HeldButIdle(v) && HeldButIdle(s); }))
      << AdminJob(v).dump() << AdminJob(s).dump();
  // A sample taken since both are idle (utilization_sample: 1s).
  ASSERT_TRUE(WaitFor([&] {
    Json u = Call("GET", "/v1/utilization?by=group&since=0", {}, "admin-token-1");
    if (!u.is_object() || u["samples"].empty()) return false;
    const Json& by = u["samples"].back()["by"];
    return by.value("speech", Json::object()).value("gpu_milli_held_idle", 0) == 1000 &&
           by.value("vision", Json::object()).value("gpu_milli_held_idle", 0) == 100;
  }));
  const std::string rows =
      "[...document.querySelectorAll('#held-idle tbody tr[data-group]')].map(r => "
      "[...r.cells].map(c => c.textContent))";
  Json r = Browse({
      Goto(Url("token=admin-token-1")),
      Wait("document.querySelectorAll('#held-idle tbody tr[data-group]').length == 2 && "
           "document.querySelectorAll('#held-idle-charts figure').length == 2"),
      Eval(rows, "rows"),
      Eval("[...document.querySelectorAll('#held-idle-charts figure')].map(f => "
           "f.querySelector('figcaption').textContent)",
           "captions"),
      Eval("[...document.querySelectorAll('#held-idle-charts path[data-part=idle]')].map(p => "
           "[p.dataset.group, p.dataset.form])",
           "idle_paths"),
  });
  ASSERT_TRUE(r.contains("idle_paths")) << r.dump(1);
  // The most idle first: speech's whole card, then vision's share.
  EXPECT_EQ(r["rows"], Json({Json({"speech", "whole cards", "1", "0", "1"}),
                             Json({"vision", "shares", "0.1", "0", "0.1"})}))
      << r.dump(1);
  EXPECT_EQ(r["captions"], Json({"speech 1 held now, 1 idle: whole cards 1 (1 idle)",
                                 "vision 0.1 held now, 0.1 idle: shares 0.1 (0.1 idle)"}))
      << r.dump(1);
  EXPECT_EQ(r["idle_paths"],
            Json::array({Json::array({"speech", "whole"}), Json::array({"vision", "share"})}))
      << r.dump(1);
}

// An admin drains a node: Nodes, the node's tile (two clicks from the overview), then Drain on its
// card, which asks first; the server's answer is shown, the node reads draining or drained, and
// the job that ran there is stopped and requeued (the API says so).
TEST_F(DashboardTasksTest, AnAdminDrainsANodeFromItsCardAfterAConfirmation) {
  StartAgents(2, "1xH100-80GB");
  const std::string id = Submit("speech-token-1", "sam-train", {"sleep", "1000"}, "training");
  ASSERT_TRUE(WaitFor([&] { return AdminState(id) == "running"; })) << AdminJob(id).dump();
  const std::string node = AdminJob(id)["placement"]["node"];
  const std::string card = "#cardmap .node[data-node=\"" + node + "\"]";
  Json r = Browse({
      Goto(Url("token=admin-token-1")),
      Wait("document.querySelector('#gpus-total').textContent != '-'"),
      Click("nav a[data-view=nodes]"),
      Wait("document.querySelector('#heatmap a[data-node=\"" + node + "\"]')"),
      Click("#heatmap a[data-node=\"" + node + "\"]"),
      Wait("document.querySelector('" + card + " [data-node-action=drain]')"),
      Eval("[...document.querySelectorAll('" + card +
               " [data-node-action]')].map(b => b.textContent)",
           "offered"),
      Click(card + " [data-node-action=drain]"),
      Eval("document.querySelector('#confirm').open", "asked"),
      Eval("document.querySelector('#confirm-text').textContent", "question"),
      Click("#confirm-yes"),
      Wait("/accepted/.test((document.querySelector('" + card +
               " .node-answer') || {}).textContent) && ['draining', 'drained'].includes("
               "document.querySelector('" +
               card + "').dataset.adminState)",
           20000),
      Eval("document.querySelector('" + card + " .node-answer').textContent", "answer"),
      Eval("[...document.querySelectorAll('" + card +
               " [data-node-action]')].map(b => b.textContent)",
           "offered_after"),
  });
  ASSERT_TRUE(r.contains("offered_after")) << r.dump(1);
  EXPECT_EQ(r["offered"], Json({"Cordon", "Drain…"})) << r.dump(1);
  EXPECT_EQ(r["asked"], true);
  EXPECT_NE(r.value("question", "").find("Drain node " + node), std::string::npos) << r.dump(1);
  EXPECT_NE(r.value("answer", "").find("The server accepted: " + node + " is drain"),
            std::string::npos)
      << r.dump(1);
  EXPECT_EQ(r["offered_after"], Json({"Uncordon"})) << r.dump(1);
  std::string state;
  for (const auto& n : Nodes())
    if (n["name"] == node) state = n.value("admin_state", "");
  EXPECT_TRUE(state == "draining" || state == "drained") << Nodes().dump();
  // Stopped and requeued: it may already run again on the other node by the time this looks
  // (simulated agents stop at once), so the preemption is what is waited for, and the drained
  // node is where it must not be.
  ASSERT_TRUE(WaitFor([&] { return AdminJob(id).value("preemptions", 0) >= 1; }))
      << AdminJob(id).dump();
  const Json after = AdminJob(id);
  if (after.value("state", "") == "running") {
    EXPECT_NE(after["placement"]["node"], node) << after.dump();
  }
  EXPECT_FALSE(Events("kind=node.drained").empty());
}

// A job submitted through the API while the jobs view is open (one click from the overview)
// appears in the table without a reload, with its name, user and state.
TEST_F(DashboardTasksTest, AJobSubmittedThroughTheApiAppearsLive) {
  const std::string first = Submit("vision-token-1", "already-there");
  const std::string marker = dir_ + "/page-open";
  std::string live;
  std::thread submitter([&] {
    if (WaitFor([&] { return std::filesystem::exists(marker); }, 60000))
      live = Submit("speech-token-1", "appears-live");
  });
  Json r = Browse({
      Goto(Url("token=admin-token-1")),
      Wait("document.querySelector('#gpus-total').textContent != '-'"),
      Click("nav a[data-view=jobs]"),
      Wait("document.querySelector('#jobs tbody tr[data-job]')"),
      Eval(kRowIds, "before"),
      {{"touch", marker}},
      Wait("[...document.querySelectorAll('#jobs tbody tr')].some(r => "
           "/appears-live/.test(r.textContent))",
           20000),
      Eval("[...document.querySelector('#jobs tbody tr').cells].slice(0, 4).map(c => "
           "c.textContent)",
           "row"),
      Eval("document.querySelector('#jobs tbody tr').dataset.state", "state"),
      Eval("document.querySelector('#jobs-count').textContent", "count"),
  });
  submitter.join();
  ASSERT_FALSE(live.empty());
  EXPECT_EQ(r["before"], Json({first})) << r.dump(1);
  EXPECT_EQ(r["row"], Json({"appears-live " + live, "sam", "speech", "notebooks"})) << r.dump(1);
  EXPECT_EQ(r["state"], "pending") << "no agent: it waits";
  EXPECT_NE(r.value("count", "").find("2 of 2 jobs"), std::string::npos) << r.dump(1);
}

TEST_F(DashboardTasksTest, NoViewHasASeriousOrCriticalAccessibilityViolationAtADesktopsWidth) {
  ExpectNoSeriousAccessibilityViolation(1366);
}

TEST_F(DashboardTasksTest, NoViewHasASeriousOrCriticalAccessibilityViolationAt420Px) {
  ExpectNoSeriousAccessibilityViolation(420);
}

}  // namespace
}  // namespace tessera
