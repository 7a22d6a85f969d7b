#include "model/job_state.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace tessera {
namespace {

TEST(JobStateTest, EveryNameRoundTrips) {
  std::set<std::string> names;
  for (JobState s : kJobStates) {
    const std::string name = JobStateName(s);
    names.insert(name);
    Result<JobState> back = ParseJobState(name);
    ASSERT_TRUE(back.ok()) << name << ": " << back.status().ToString();
    EXPECT_EQ(*back, s) << name;
  }
  // Today's wire and stored words, exactly: the API, the store's rows and the CLI keep them.
  EXPECT_EQ(names, (std::set<std::string>{"pending", "placed", "starting", "running", "preempting",
                                          "succeeded", "failed", "cancelled", "lost"}));
}

TEST(JobStateTest, UnknownNamesAreRefusedByName) {
  for (const char* bad : {"", "admitted", "Running", "running ", "done", "suspended", "pend"}) {
    Result<JobState> got = ParseJobState(bad);
    ASSERT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find("'" + std::string(bad) + "'"), std::string::npos)
        << got.status().message();
  }
}

TEST(JobStateTest, TerminalAndHoldingStates) {
  std::set<JobState> terminal, holding;
  for (JobState s : kJobStates) {
    if (IsTerminal(s)) terminal.insert(s);
    if (HoldsCapacity(s)) holding.insert(s);
    EXPECT_FALSE(IsTerminal(s) && HoldsCapacity(s)) << JobStateName(s);
  }
  EXPECT_EQ(terminal, (std::set<JobState>{JobState::kSucceeded, JobState::kFailed,
                                          JobState::kCancelled, JobState::kLost}));
  EXPECT_EQ(holding, (std::set<JobState>{JobState::kPlaced, JobState::kStarting, JobState::kRunning,
                                         JobState::kPreempting}));
  EXPECT_EQ(kInitialJobState, JobState::kPending);
}

// The table, written out again by hand: a change to job_state.cc fails here until this copy
// changes with it. Rows: from; columns: to, in the order of kJobStates; each cell the causes
// that make that change ("" none).
constexpr const char* kExpected[9][9] = {
    // to: pending, placed, starting, running, preempting, succeeded, failed, cancelled, lost
    /* pending */ {"", "placed", "", "", "", "", "refused", "cancelled", ""},
    /* placed */
    {"requeued", "", "started", "running", "preempted", "exited", "exited refused",
     "exited cancelled", "lost"},
    /* starting */
    {"requeued", "", "", "running", "preempted", "exited", "exited refused", "exited cancelled",
     "lost"},
    /* running */
    {"requeued", "", "", "", "preempted", "exited", "exited refused", "exited cancelled", "lost"},
    /* preempting */
    {"requeued", "", "", "", "", "exited", "exited refused", "exited cancelled", "lost"},
    /* succeeded */ {"", "", "", "", "", "", "", "", ""},
    /* failed */ {"", "", "", "", "", "", "", "", ""},
    /* cancelled */ {"", "", "", "", "", "", "", "", ""},
    /* lost */ {"", "", "", "", "", "", "", "", ""},
};

constexpr JobCause kCauses[] = {JobCause::kPlaced,    JobCause::kStarted,  JobCause::kRunning,
                                JobCause::kPreempted, JobCause::kRequeued, JobCause::kExited,
                                JobCause::kCancelled, JobCause::kLost,     JobCause::kRefused};

TEST(JobStateTest, TheTableIsTheExpectedOnePairByPair) {
  for (size_t f = 0; f < kJobStates.size(); ++f) {
    for (size_t t = 0; t < kJobStates.size(); ++t) {
      const JobState from = kJobStates[f], to = kJobStates[t];
      const std::string pair = std::string(JobStateName(from)) + " -> " + JobStateName(to);
      std::string causes;
      for (JobCause c : kCauses) {
        if (!CheckJobTransition(from, to, c).ok()) continue;
        causes += (causes.empty() ? "" : " ") + std::string(JobCauseName(c));
      }
      EXPECT_EQ(causes, kExpected[f][t]) << pair;
      EXPECT_EQ(JobTransitionAllowed(from, to), !causes.empty()) << pair;
    }
  }
  // Each row of the table once.
  std::set<std::tuple<JobState, JobState, JobCause>> rows;
  for (const JobTransition& t : JobTransitions()) {
    EXPECT_TRUE(rows.insert({t.from, t.to, t.cause}).second)
        << JobStateName(t.from) << " -> " << JobStateName(t.to) << " twice";
  }
}

TEST(JobStateTest, TerminalStatesHaveNoWayOut) {
  for (JobState from : kJobStates) {
    if (!IsTerminal(from)) continue;
    for (JobState to : kJobStates) {
      EXPECT_FALSE(JobTransitionAllowed(from, to))
          << JobStateName(from) << " -> " << JobStateName(to);
      for (JobCause c : kCauses) EXPECT_FALSE(CheckJobTransition(from, to, c).ok());
    }
  }
  for (const JobTransition& t : JobTransitions()) EXPECT_FALSE(IsTerminal(t.from));
}

TEST(JobStateTest, EveryStateThatHasNotEndedCanEnd) {
  // Nothing is stuck: a job that has not ended can always fail (refused) and, but for pending,
  // be lost or exit.
  for (JobState s : kJobStates) {
    if (IsTerminal(s)) continue;
    EXPECT_TRUE(CheckJobTransition(s, JobState::kFailed, JobCause::kRefused).ok())
        << JobStateName(s);
    EXPECT_EQ(JobTransitionAllowed(s, JobState::kLost), HoldsCapacity(s)) << JobStateName(s);
  }
}

TEST(JobStateTest, ARefusalNamesBothStatesAndTheCause) {
  Status st = CheckJobTransition(JobState::kSucceeded, JobState::kRunning, JobCause::kRunning);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(),
            "job state 'succeeded' cannot become 'running' (running): not in the job state table");
  // A pair the table holds, by another cause, is refused too.
  st = CheckJobTransition(JobState::kPending, JobState::kPlaced, JobCause::kStarted);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'pending'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'placed'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("(started)"), std::string::npos) << st.message();
}

TEST(JobStateTest, TheApiDescriptionNamesTheSameStates) {
  // docs/openapi.json's Job.state lists the served states in the enum's order.
  std::ifstream in(TESSERA_SOURCE_DIR "/docs/openapi.json");
  ASSERT_TRUE(in) << "docs/openapi.json missing";
  const nlohmann::json api = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(api.is_discarded());
  const nlohmann::json& listed = api["components"]["schemas"]["Job"]["properties"]["state"]["enum"];
  std::vector<std::string> want;
  for (JobState s : kJobStates) want.push_back(JobStateName(s));
  EXPECT_EQ(listed.get<std::vector<std::string>>(), want);
}

TEST(JobStateTest, CauseNames) {
  std::set<std::string> names;
  for (JobCause c : kCauses) names.insert(JobCauseName(c));
  EXPECT_EQ(names.size(), std::size(kCauses));
  EXPECT_EQ(names.count("?"), 0u);
}

}  // namespace
}  // namespace tessera
