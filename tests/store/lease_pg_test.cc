// The PostgreSQL leader lease (src/store/postgres_lease.h) against a private PostgreSQL server:
// - a leader stopped with SIGSTOP (most likely in the middle of a write: it commits without a
//   pause) keeps its database session, yet a standby takes the lease within 10 s, no sooner than
//   the lease's expiry allows; resumed, the old leader's next write is refused ("deposed") and it
//   wrote nothing after the standby took over;
// - LeaseFresh ends with the lease: once the leader's lease session is cut, within the renewal
//   period, and CheckLease fails.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "../support/wait.h"
#include "pg_harness.h"
#include "store/internal.h"
#include "store/store.h"

namespace tessera::store {
namespace {

using Clock = std::chrono::steady_clock;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class LeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string err;
    testing::PgServer* pg = testing::SharedPgServer(&err);
    ASSERT_NE(pg, nullptr) << err;
    auto url = pg->CreateUniqueDatabase("lease");
    ASSERT_TRUE(url.ok()) << url.status().ToString();
    url_ = *url;
  }
  void TearDown() override {
    if (child_ > 0) {
      kill(child_, SIGCONT);
      kill(child_, SIGKILL);
      waitpid(child_, nullptr, 0);
    }
    if (!out_.empty()) unlink(out_.c_str());
  }
  std::unique_ptr<Store> MustOpen() {
    auto s = Store::Open(url_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  // store_lease_holder on the store, its output in out_.
  void StartHolder() {
    out_ = ::testing::TempDir() + "/lease_holder_" + std::to_string(getpid()) + ".out";
    child_ = fork();
    if (child_ == 0) {
      const int fd = open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      execl(STORE_LEASE_HOLDER, STORE_LEASE_HOLDER, url_.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  std::string url_, out_;
  pid_t child_ = -1;
};

TEST_F(LeaseTest, AStoppedLeaderLosesTheLeaseWithin10sAndItsLateWritesAreRefused) {
  StartHolder();
  ASSERT_TRUE(testing::WaitFor([&] { return ReadAll(out_).find("ok 20\n") != std::string::npos; },
                               std::chrono::seconds(15)))
      << ReadAll(out_);
  kill(child_, SIGSTOP);
  const auto stopped = Clock::now();
  auto standby = MustOpen();
  ASSERT_NE(standby, nullptr);
  std::optional<Store::Leadership> took;
  testing::WaitFor(
      [&] {
        auto l = standby->TryLead("http://standby:1");
        EXPECT_TRUE(l.ok()) << l.status().ToString();
        if (l.ok()) took = *l;
        return took.has_value();
      },
      std::chrono::seconds(20), std::chrono::milliseconds(100));
  const double after = std::chrono::duration<double>(Clock::now() - stopped).count();
  ASSERT_TRUE(took.has_value()) << "the standby never got the lease";
  EXPECT_EQ(took->epoch, 2);
  EXPECT_LT(after, 10.0) << "the standby took the lease " << after << " s after the stop";
  // The stopped leader's session lived: the expiry decided, not its death.
  EXPECT_GE(after,
            static_cast<double>(internal::PgLeaseTtlMs() - internal::PgLeaseRenewMs()) / 1000.0);
  EXPECT_TRUE(standby->LeaseFresh());
  EXPECT_TRUE(standby->CheckLease().ok());
  const int64_t seq = *standby->LastSeq();

  kill(child_, SIGCONT);
  int status = 0;
  ASSERT_TRUE(testing::WaitFor([&] { return waitpid(child_, &status, WNOHANG) == child_; },
                               std::chrono::seconds(15)))
      << ReadAll(out_).substr(0, 2000);
  child_ = -1;
  const std::string out = ReadAll(out_);
  ASSERT_TRUE(WIFEXITED(status)) << out.substr(out.size() > 2000 ? out.size() - 2000 : 0);
  EXPECT_EQ(WEXITSTATUS(status), 3) << out.substr(out.size() > 2000 ? out.size() - 2000 : 0);
  EXPECT_NE(out.find("deposed"), std::string::npos);
  EXPECT_EQ(*standby->LastSeq(), seq) << "the resumed leader wrote after the standby took over";
  std::printf("[lease] the standby took the lease %.2f s after the leader's SIGSTOP (%s)\n", after,
              out.find("\nfailed ") != std::string::npos
                  ? "stopped mid-write: its transaction was ended by the database"
                  : "stopped between writes");
}

TEST_F(LeaseTest, LeaseFreshEndsWhenTheLeadersSessionIsCut) {
  auto leader = MustOpen();
  ASSERT_NE(leader, nullptr);
  EXPECT_TRUE(leader->LeaseFresh()) << "a store that never led is fresh (nothing to lose)";
  auto l = leader->TryLead("http://leader:1");
  ASSERT_TRUE(l.ok() && l->has_value()) << l.status().ToString();
  EXPECT_TRUE(leader->LeaseFresh());
  ASSERT_TRUE(internal::ExecSql(url_,
                                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE "
                                "locktype = 'advisory' AND objid = 2119559073")
                  .ok());
  EXPECT_TRUE(testing::WaitFor([&] { return !leader->LeaseFresh(); },
                               std::chrono::milliseconds(internal::PgLeaseRenewMs() * 3)));
  EXPECT_FALSE(leader->CheckLease().ok());
  // A standby takes it at once: the holder's session is gone.
  auto standby = MustOpen();
  ASSERT_NE(standby, nullptr);
  auto took = standby->TryLead("http://standby:1");
  ASSERT_TRUE(took.ok()) << took.status().ToString();
  EXPECT_TRUE(took->has_value());
}

}  // namespace
}  // namespace tessera::store
