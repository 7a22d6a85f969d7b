// More of a person's tasks on the dashboard (the fixture in dashboard_tasks.h: a real
// `tessera serve`, simulated agents, headless Chromium driven by puppeteer-core):
// - why my job waits and when it should start, two clicks from the overview (Jobs, the job);
// - an admin uploads a fleet's GPU usage history on the what-if page (the parser and planner of
//   `tessera whatif --usage`, through POST /v1/whatif/usage) and reads the cards it would need,
//   whole, under forms and with swapping, beside the lower bound; a bad row is named by its line.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "dashboard_tasks.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::Axe;
using testing::Click;
using testing::DashboardTasksTest;
using testing::Eval;
using testing::Goto;
using testing::Upload;
using testing::Wait;

// Sam's first training job holds the only card for its declared hour; his second waits for it:
// the scheduler keeps the card for it, expected free when the first one's walltime ends. On the
// overview he clicks Jobs (the table's reason column says it), then the job (its page says why it
// waits, when it should start, and its place in line). No epoch seconds anywhere.
TEST_F(DashboardTasksTest, WhyMyJobWaitsAndWhenItShouldStart) {
  // Without vision's reservation of the only card: sam's jobs (of the non-preemptible training
  // queue) could not borrow it (docs/scheduling.md, "Admit").
  server_.reset();
  std::string config = testing::kDashboardTasksConfig;
  const std::string reserved = "{name: vision, reservation: {gpu: 1}}";
  config.replace(config.find(reserved), reserved.size(), "{name: vision}");
  WriteConfig(config);
  StartServer();
  StartAgents(1, "1xH100-80GB");
  auto submit = [&](const std::string& name) {
    Json r = Call(
        "POST", "/v1/jobs",
        {{"queue", "training"}, {"command", {"sleep", "1000"}}, {"name", name}, {"walltime", "1h"}},
        "speech-token-1");
    EXPECT_TRUE(r.is_object() && r.contains("id")) << r.dump();
    return r.is_object() ? r.value("id", "") : "";
  };
  const std::string first = submit("sam-first");
  ASSERT_TRUE(WaitFor([&] { return AdminState(first) == "running"; })) << AdminJob(first).dump();
  const std::string second = submit("sam-second");
  ASSERT_TRUE(WaitFor([&] {
    Json j = AdminJob(second);
    return j.is_object() && j.contains("forecast") && j["forecast"].contains("expected_start_ms");
  })) << AdminJob(second).dump();
  const Json forecast = AdminJob(second)["forecast"];
  ASSERT_EQ(forecast["position"], 1) << forecast.dump();
  const std::string row = "document.querySelector('#jobs tbody tr[data-job=\"" + second + "\"]')";
  Json r = Browse({
      Goto(Url("token=speech-token-1")),
      Wait("document.querySelector('#gpus-total').textContent != '-'"),
      Click("nav a[data-view=jobs]"),
      Wait(row),
      Eval(row + ".dataset.state", "state"),
      Eval("[..." + row + ".cells].pop().textContent", "reason_cell"),
      Click("[data-open=\"" + second + "\"]"),
      Wait("document.querySelector('#job-detail [data-forecast]')"),
      Eval("document.querySelector('#job-detail [data-forecast]').textContent", "forecast"),
      Eval("document.querySelector('#job-detail [data-wait]').textContent", "wait"),
      Eval("document.querySelector('#job-detail').innerText", "page"),
  });
  ASSERT_TRUE(r.contains("page")) << r.dump(1);
  EXPECT_EQ(r["state"], "pending");
  // Expected in about an hour (the first job's walltime, less the seconds it has run): 59 or
  // 60 min, and first in line.
  const std::regex when(R"(expected to start in (59|60) min \(1st in line\))");
  EXPECT_TRUE(std::regex_search(r.value("forecast", ""), when)) << r.dump(1);
  EXPECT_TRUE(std::regex_search(r.value("reason_cell", ""), when)) << r.dump(1);
  // Why: the step it waits at and the reason, that the card is kept for it, in words.
  EXPECT_NE(r.value("wait", "").find("Waiting at "), std::string::npos) << r.dump(1);
  EXPECT_NE(r.value("wait", "").find("keeps 1 device(s) on sim"), std::string::npos) << r.dump(1);
  // Times for people: never the reason's raw "expected free at t=1796242375s".
  const std::regex epoch(R"(t=\d{6,}s)");
  for (const char* k : {"reason_cell", "wait", "page"}) {
    EXPECT_FALSE(std::regex_search(r.value(k, ""), epoch)) << k << ": " << r[k];
  }
}

// Vee's group reserves the only card, which Sam's job borrows: Vee's job reclaims it. The
// preemption's reason says when the grace ends ("grace until t=SECONDS s" as the scheduler writes
// it): on the overview's recent events and the Events view it reads as a time, as in the CLI,
// never as epoch seconds (they did, where the word before it was not "at"), and a time to come
// as "in ..." (it read "just now").
TEST_F(DashboardTasksTest, APreemptionsGraceEndsAtATimeForPeople) {
  server_.reset();  // again, with training jobs preemptible
  std::string config = testing::kDashboardTasksConfig;
  const std::string training = "class: training}";
  config.replace(config.find(training), training.size(), "class: training, preemptible: true}");
  config +=
      "grace: 60s\n";  // the grace ends a minute after the preemption: "in 1 min", not "just now"
  WriteConfig(config);
  StartServer();
  StartAgents(1, "1xH100-80GB");
  const auto submit = [&](const std::string& token, const std::string& name) {
    Json r = Call("POST", "/v1/jobs",
                  {{"queue", "training"}, {"command", {"sleep", "1000"}}, {"name", name}}, token);
    EXPECT_TRUE(r.is_object() && r.contains("id")) << r.dump();
    return r.is_object() ? r.value("id", "") : "";
  };
  const std::string borrower = submit("speech-token-1", "sam-borrows");
  ASSERT_TRUE(WaitFor([&] { return AdminState(borrower) == "running"; }))
      << AdminJob(borrower).dump();
  submit("vision-token-1", "vee-reclaims");
  ASSERT_TRUE(WaitFor([&] { return AdminState(borrower) != "running"; }))
      << AdminJob(borrower).dump();
  const std::string preempted = "[data-kind=\"job.preempted\"]";
  Json r = Browse({
      Goto(Url("token=admin-token-1")),
      Wait("document.querySelector('#ov-events " + preempted + "')"),
      Eval("document.querySelector('#ov-events " + preempted + "').textContent", "overview"),
      Click("nav a[data-view=events]"),
      Wait("document.querySelector('#events tbody tr" + preempted + "')"),
      Eval("document.querySelector('#events tbody tr" + preempted + "').textContent", "events"),
  });
  const std::regex epoch(R"(t=\d{6,}s)");
  for (const char* k : {"overview", "events"}) {
    ASSERT_TRUE(r.contains(k)) << r.dump(1);
    EXPECT_TRUE(std::regex_search(r.value(k, ""), std::regex(R"(grace until \d\d:\d\d \(in )")))
        << k << ": " << r[k];
    EXPECT_FALSE(std::regex_search(r.value(k, ""), epoch)) << k << ": " << r[k];
  }
}

constexpr int64_t kGiB = 1024LL * 1024 * 1024;

// Ten notebooks of 16 GiB over 6 hours of one-minute samples, each busy 6 minutes an hour in turn
// (idle 90%, never two at once): 10 whole cards, 3 under forms, 1 with swapping, lower bound 1
// (tests/sim/usage_whatif_test.cc's known answer).
std::string TenNotebooks() {
  std::string csv = "workload,timestamp,gpu_util_pct,gpu_memory_bytes,team,requested_gpus\n";
  for (int k = 0; k < 10; ++k) {
    for (int m = 0; m < 6 * 60; ++m) {
      csv += "nb" + std::to_string(k) + "," + std::to_string(1'700'000'000 + 60 * m) + "," +
             ((m % 60) / 6 == k ? "80" : "0") + "," + std::to_string(16 * kGiB) + ",research,1\n";
    }
  }
  return csv;
}

// An admin opens What-if (one click) and chooses a usage history file: the page answers with the
// cards needed per plan beside the lower bound, and per workload its duty cycle. A file with a bad
// row gets the file and line named. No serious accessibility violation, at 1366 and 420 px.
TEST_F(DashboardTasksTest, AnAdminUploadsAUsageHistoryAndSeesTheCardsItNeeds) {
  const std::string fleet = dir_ + "/fleet.csv", bad = dir_ + "/bad.csv";
  std::ofstream(fleet) << TenNotebooks();
  std::ofstream(bad) << "workload,timestamp,gpu_util_pct,gpu_memory_bytes\n"
                        "a,1700000000,50,1073741824\n"
                        "a,1700000060,lots,1073741824\n";
  const std::string plans =
      "[...document.querySelectorAll('#usage-plans tbody tr[data-plan]')].map(r => "
      "[r.dataset.plan, r.cells[1].textContent])";
  for (const int width : {1366, 420}) {
    Json r = Browse(
        {
            Goto(Url("token=admin-token-1")),
            Wait("document.querySelector('#gpus-total').textContent != '-'"),
            Click("nav a[data-view=whatif]"),
            Wait("/jobs replayed/.test(document.querySelector('#whatif-note').textContent)"),
            Upload("#u-file", fleet),
            Wait("!document.querySelector('#usage-result').hidden", 30000),
            Eval(plans, "plans"),
            Eval("document.querySelector('#usage-answer').textContent", "answer"),
            Eval("document.querySelector('#usage-note').textContent", "note"),
            Eval("[...document.querySelectorAll('#usage-workloads tbody tr')].map(r => "
                 "[r.dataset.workload, r.cells[6].textContent])[3]",
                 "nb3"),
            Axe("axe"),
            Upload("#u-file", bad),
            Wait("/bad\\.csv: line 3/.test(document.querySelector('#usage-note').textContent)"),
            Eval("document.querySelector('#usage-note').textContent", "bad"),
            Eval("document.querySelector('#usage-result').hidden", "hidden"),
        },
        width);
    ASSERT_TRUE(r.contains("hidden")) << width << " px: " << r.dump(1);
    EXPECT_EQ(r["plans"], Json::parse(R"([["whole","10"],["forms","3"],["swap","1"],
                                          ["lower-bound","1"]])"))
        << r.dump(1);
    EXPECT_NE(r.value("answer", "")
                  .find("Cards needed: 10 as whole cards, 3 under forms, 1 with "
                        "swapping; at least 1 whatever the scheduler"),
              std::string::npos)
        << r.dump(1);
    EXPECT_NE(r.value("note", "").find("fleet.csv: 10 workloads, 3600 samples every 1 min"),
              std::string::npos)
        << r.dump(1);
    EXPECT_EQ(r["nb3"], Json({"nb3", "10.0%"})) << r.dump(1);
    EXPECT_TRUE(r["axe"].empty()) << width << " px: " << r["axe"].dump(1);
    EXPECT_NE(r.value("bad", "").find("gpu_util_pct"), std::string::npos) << r.dump(1);
    EXPECT_EQ(r["hidden"], true) << "the earlier answer is not left beside the error";
  }
  // The API behind it: admins only, bad parameters named.
  auto post = [&](const std::string& token, const std::string& query) {
    auto res = client_->Post(("/v1/whatif/usage" + query).c_str(),
                             {{"Authorization", "Bearer " + token}}, TenNotebooks(), "text/csv");
    return res ? std::make_pair(res->status, res->body) : std::make_pair(0, std::string());
  };
  EXPECT_EQ(post("speech-token-1", "").first, 403);
  const auto [status, body] = post("admin-token-1", "?card=Z9000");
  EXPECT_EQ(status, 400);
  EXPECT_NE(body.find("card: "), std::string::npos) << body;
}

// Quota per GPU model (issue 37): vision reserves one A100-80GB and may hold two; its training
// job holds one. The groups view shows, per group and model, held, reservation and limit; a
// group with no quota on a model and holding none of it has no row.
TEST_F(DashboardTasksTest, TheGroupsViewShowsWhatAGroupHoldsOnEachGpuModel) {
  server_.reset();
  std::string config = testing::kDashboardTasksConfig;
  const std::string plain = "{name: vision, reservation: {gpu: 1}}";
  ASSERT_NE(config.find(plain), std::string::npos);
  config.replace(config.find(plain), plain.size(),
                 "{name: vision, reservation: {gpu: 1, models: {A100-80GB: 1}}, "
                 "limit: {models: {A100-80GB: 2}}}");
  WriteConfig(config);
  StartServer();
  StartAgents(1, "2xA100-80GB");
  const std::string v = Submit("vision-token-1", "vee-train", {"sleep", "1000"}, "training");
  ASSERT_TRUE(WaitFor([&] { return AdminState(v) == "running"; })) << AdminJob(v).dump();
  const std::string rows =
      "[...document.querySelectorAll('#group-models tbody tr')].map(r => "
      "[...r.cells].map(c => c.textContent))";
  Json r = Browse({
      Goto(Url("token=admin-token-1")),
      Wait("document.querySelector('#gpus-total').textContent != '-'"),
      Click("nav a[data-view=groups]"),
      Wait("document.querySelector('#group-models tbody tr[data-group=vision]"
           "[data-model=\"A100-80GB\"]') && "
           "document.querySelector('#group-models tbody tr[data-group=vision]').cells[2]"
           ".textContent == '1'"),
      Eval(rows, "rows"),
      Eval("document.querySelector('#group-models-part').hidden", "hidden"),
      Axe("axe"),
  });
  ASSERT_TRUE(r.contains("rows")) << r.dump(1);
  EXPECT_EQ(r["rows"], Json::parse(R"([["vision", "A100-80GB", "1", "1", "2"]])")) << r.dump(1);
  EXPECT_EQ(r["hidden"], false);
  EXPECT_TRUE(r["axe"].empty()) << r["axe"].dump(1);
}

}  // namespace
}  // namespace tessera
