// The backend-independent store suite, its crash test: a writer SIGKILLed at random points
// leaves every commit it acknowledged whole in the store, and nothing torn (see store_suite.h).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "crash_records.h"
#include "store_suite.h"

namespace tessera::store {
namespace {

struct Ack {
  int64_t job;
  int64_t seq_submitted;
  int64_t seq_placed;
};

// Starts the writer on `url`, SIGKILLs it `kill_after` after start, and returns every commit it
// acknowledged before dying.
std::vector<Ack> RunWriterAndKill(const std::string& url, std::chrono::milliseconds kill_after) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2 failed";
    return {};
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    execl(STORE_CRASH_WRITER, STORE_CRASH_WRITER, url.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + kill_after;
  bool eof = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) > 0) {
      const ssize_t n = read(fds[0], buf, sizeof(buf));
      if (n <= 0) {
        eof = true;
        break;
      }
      text.append(buf, static_cast<size_t>(n));
    }
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_FALSE(eof) << "the writer ended by itself (see its stderr above)";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "writer exit status " << status;
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  std::vector<Ack> acks;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a line without '\n' was not written whole; ignore it
    std::istringstream ls(line);
    Ack a{};
    ls >> a.job >> a.seq_submitted >> a.seq_placed;
    acks.push_back(a);
  }
  return acks;
}

// The whole store must be exactly the first N commits of the writer, each whole.
void ExpectExactlyWholeCommits(Store& store, const std::vector<Ack>& acks) {
  // PostgreSQL may still be finishing the killed writer's last COMMIT (its session ends after
  // the client is gone), and jobs and events are read by two statements: one that lands between
  // them looks like a torn commit for a moment. A torn commit stays torn; an in-flight one
  // settles within the server's own time, so read again until the two agree or 5 s pass. (A
  // server never reads a half-ended predecessor: the predecessor's lease is its session's
  // advisory lock, released only when that session is over.)
  auto jobs = store.LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  auto events = AllEvents(store);
  for (int i = 0; i < 50 && events.size() != 2 * jobs->size(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    jobs = store.LoadJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
    events = AllEvents(store);
  }
  const int64_t n = static_cast<int64_t>(jobs->size());
  ASSERT_EQ(static_cast<int64_t>(events.size()), 2 * n)
      << "events and job records disagree: a commit was torn";
  EXPECT_EQ(*store.LastSeq(), 2 * n);
  for (int64_t i = 0; i < n; ++i) {
    // Every third commit rewrote job i-1; the last job may not have been rewritten yet.
    const bool updated = (i + 1) % 3 == 0 && i + 1 < n;
    JobRecord want = crashtest::Job(i, updated);
    ExpectSameJob((*jobs)[static_cast<size_t>(i)], want);
    auto want_events = crashtest::Events(i);
    want_events[0].seq = 2 * i + 1;
    want_events[1].seq = 2 * i + 2;
    ExpectSameEvent(events[static_cast<size_t>(2 * i)], want_events[0]);
    ExpectSameEvent(events[static_cast<size_t>(2 * i + 1)], want_events[1]);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "first bad commit: " << i;
      return;
    }
  }
  for (const auto& a : acks) {
    ASSERT_LT(a.job, n) << "acknowledged job " << crashtest::JobId(a.job) << " is missing";
    EXPECT_EQ(a.seq_submitted, 2 * a.job + 1);
    EXPECT_EQ(a.seq_placed, 2 * a.job + 2);
  }
}

TEST_P(StoreSuite, CrashKeepsEveryAcknowledgedCommitWhole) {
  const std::string url = NewUrl();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // The first kill lands during Open (creation and migration), the others at random points
  // of the commit loop.
  std::uniform_int_distribution<int> delay_ms(30, 300);
  size_t total_acks = 0;
  int64_t stored = 0;
  for (int run = 0; run < 10; ++run) {
    const auto delay = std::chrono::milliseconds(run == 0 ? 3 : delay_ms(rng));
    SCOPED_TRACE("run " + std::to_string(run) + ", killed after " + std::to_string(delay.count()) +
                 " ms");
    auto acks = RunWriterAndKill(url, delay);
    total_acks += acks.size();
    auto store = Store::Open(url);
    if (run == 0 && !store.ok()) continue;  // killed before anything was created: fine
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ExpectExactlyWholeCommits(**store, acks);
    if (HasFailure()) return;
    stored = static_cast<int64_t>((*store)->LoadJobs()->size());
  }
  EXPECT_GT(total_acks, 0u) << "the writer never acknowledged a commit";
  std::printf("crash test (%s, seed %u): 10 kills, %zu commits acknowledged, %lld in the store\n",
              GetParam().c_str(), seed, total_acks, static_cast<long long>(stored));
}

}  // namespace
}  // namespace tessera::store
