// store_bench: durable commits per second and commit latency of the store backends.
//
// Each commit is what a job submission writes: one "job.submitted" event and one job record,
// in one durable transaction. Commits run back to back from one thread (the engine commits from
// one thread). Prints throughput, p50/p99/max latency and the conditions.
//
//   store_bench [--commits 10000] [--backends sqlite,postgresql] [--dir DIR] [--pg-url URL]
//               [--list-jobs N] [--steady N] [--migrate N]
//
// With --list-jobs N (0: skip), each backend also times the dashboard's read after a cycle: N
// jobs submitted, then one commit placing 79% of them (as the cycle of served_cycle_bench does)
// and ending 1%, then a list of every job (GET /v1/jobs asks the store for the jobs memory does not
// hold plus the limit), once while the cycle's progress is unfolded (SQLite), and again after Tidy;
// and the same for a list of the newest ended jobs (what GET /v1/jobs asks the store for now).
//
// With --migrate N (0: skip), each backend also times the upgrade of a store of N jobs (99% live,
// 1% ended) written at schema version 8 (store/internal.h's OpenAtVersion: migrations 1 to 8, as
// the release before version 9 left it): Store::Open runs migration 9, which rebuilds the three
// indexes in submit order (src/store/migrations.cc); the bench refuses to run once a version 10
// exists. Prints that open's time beside an open with nothing to migrate.
//
// With --steady N (0: skip), SQLite only: a writer never idle, so the store's upkeep (Tidy) never
// runs: N commits back to back, each one new job and the progress of 20 earlier ones (placed,
// running or ended), so that the progress log passes its bound and the commits past it fold it.
// Prints the commits' latency (p50, p99, p99.9, max), how many took over 20 ms, and the log's size
// at the end.
//
// SQLite writes a fresh file under --dir (default: a temporary directory under /tmp).
// PostgreSQL uses --pg-url, or else starts a private server (tests/store/pg_harness.h) with
// fsync on, so both backends pay for real durability.
#include <sqlite3.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "pg_harness.h"
#include "store/internal.h"  // OpenAtVersion: a store as an earlier release left it
#include "store/store.h"

namespace {

using tessera::Result;
using tessera::store::Event;
using tessera::store::JobRecord;
using tessera::store::Store;

struct Figures {
  double per_second = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
};

bool Bench(const std::string& url, int commits, Figures* out) {
  auto opened = Store::Open(url);
  if (!opened.ok()) {
    std::fprintf(stderr, "store_bench: %s\n", opened.status().ToString().c_str());
    return false;
  }
  Store& store = **opened;
  std::vector<double> lat_ms;
  lat_ms.reserve(static_cast<size_t>(commits));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < commits; ++i) {
    const std::string id = "job-" + std::to_string(i);
    Event e{0,
            1700000000000 + i,
            "user:bench",
            "job.submitted",
            id,
            "",
            "{\"queue\":\"training\",\"gpus\":1,\"gpu_memory\":\"8GiB\"}"};
    JobRecord j;
    j.id = id;
    j.queue = "training";
    j.identity = "bench";
    j.group = "g";
    j.state = "pending";
    j.spec = "{\"command\":[\"python\",\"train.py\"],\"gpus\":1}";
    j.submit_ms = e.time_ms;
    j.update_ms = e.time_ms;
    const auto t0 = std::chrono::steady_clock::now();
    auto s = store.Commit({e}, {j}, nullptr);
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) {
      std::fprintf(stderr, "store_bench: commit %d: %s\n", i, s.ToString().c_str());
      return false;
    }
    lat_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::sort(lat_ms.begin(), lat_ms.end());
  auto pct = [&](double p) {
    return lat_ms[std::min(lat_ms.size() - 1,
                           static_cast<size_t>(p * static_cast<double>(lat_ms.size())))];
  };
  out->per_second = commits / total_s;
  out->p50_ms = pct(0.50);
  out->p99_ms = pct(0.99);
  out->max_ms = lat_ms.back();
  return true;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// The list after a cycle (see the top): prints the times, false on a failure.
bool ListAfterCycle(const std::string& url, int jobs) {
  auto opened = Store::Open(url);
  if (!opened.ok()) {
    std::fprintf(stderr, "store_bench: %s\n", opened.status().ToString().c_str());
    return false;
  }
  Store& store = **opened;
  std::vector<JobRecord> records(static_cast<size_t>(jobs));
  for (int i = 0; i < jobs; ++i) {
    JobRecord& j = records[static_cast<size_t>(i)];
    j.id = "j-" + std::to_string(i + 1);
    j.queue = "training";
    j.identity = "bench";
    j.group = "g";
    j.state = "pending";
    j.spec = "{\"command\":[\"python\",\"train.py\"],\"gpus\":1,\"pad\":\"" +
             std::string(400, 'x') + "\"}";
    j.submit_ms = 1700000000000 + i;
    j.update_ms = j.submit_ms;
    j.reason = "waiting for quota";
  }
  if (auto s = store.Commit({}, records, nullptr); !s.ok()) {
    std::fprintf(stderr, "store_bench: submitting: %s\n", s.ToString().c_str());
    return false;
  }
  std::vector<JobRecord> placed;
  for (int i = 0; i < jobs; ++i) {
    if (i % 100 >= 80) continue;
    JobRecord j = records[static_cast<size_t>(i)];
    j.spec.clear();                                    // no spec: an update of the job's progress
    j.state = i % 100 == 79 ? "succeeded" : "placed";  // and 1% ended
    j.placement = "{\"node\":\"n" + std::to_string(i % 10000) + "\",\"devices\":[0]}";
    j.update_ms = j.submit_ms + 60000;
    j.reason.clear();
    placed.push_back(std::move(j));
  }
  auto t = std::chrono::steady_clock::now();
  if (auto s = store.Commit({}, placed, nullptr); !s.ok()) {
    std::fprintf(stderr, "store_bench: placing: %s\n", s.ToString().c_str());
    return false;
  }
  const double cycle_s = Seconds(t);
  double list_s[2] = {0, 0}, ended_s[2] = {0, 0}, tidy_s = 0, longest_step_s = 0;
  int steps = 0;
  size_t listed[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    if (k == 1) {
      bool more = true;
      while (more) {
        t = std::chrono::steady_clock::now();
        more = store.Tidy();
        const double step = Seconds(t);
        tidy_s += step;
        longest_step_s = std::max(longest_step_s, step);
        ++steps;
      }
    }
    t = std::chrono::steady_clock::now();
    auto all = store.ListJobs("", jobs + 500);
    list_s[k] = Seconds(t);
    if (!all.ok()) {
      std::fprintf(stderr, "store_bench: listing: %s\n", all.status().ToString().c_str());
      return false;
    }
    listed[k] = all->size();
    t = std::chrono::steady_clock::now();
    auto ended = store.ListEndedJobs("", 1500);  // the views' 500 and memory's 1,000 ended
    ended_s[k] = Seconds(t);
    if (!ended.ok()) {
      std::fprintf(stderr, "store_bench: listing: %s\n", ended.status().ToString().c_str());
      return false;
    }
  }
  std::printf(
      "  list after a cycle: %d jobs, %zu placed or ended in one commit of %.3f s; a list of all "
      "%zu: "
      "%.3f s with the progress unfolded, Tidy %.3f s in %d steps (the longest %.3f s), then "
      "%.3f s\n",
      jobs, placed.size(), cycle_s, listed[0], list_s[0], tidy_s, steps, longest_step_s, list_s[1]);
  std::printf(
      "  a list of the newest 1,500 ended jobs (%d of them): %.3f s unfolded, %.3f s "
      "folded\n",
      (jobs + 99) / 100, ended_s[0], ended_s[1]);
  return listed[0] >= static_cast<size_t>(jobs) && listed[1] == listed[0];
}

// The upgrade of --migrate (see the top): prints the times, false on a failure.
bool Migrate(const std::string& url, int jobs) {
  if (Store::LatestSchemaVersion() != 9) {
    std::fprintf(stderr, "store_bench: --migrate knows migration 9 only; this store is at %d\n",
                 Store::LatestSchemaVersion());
    return false;
  }
  {
    // Written as the release before version 9 wrote it: its schema, migrations 1 to 8.
    auto opened = tessera::store::internal::OpenAtVersion(url, 8);
    if (!opened.ok()) {
      std::fprintf(stderr, "store_bench: %s\n", opened.status().ToString().c_str());
      return false;
    }
    constexpr int kChunk = 50000;
    for (int from = 0; from < jobs; from += kChunk) {
      std::vector<JobRecord> records;
      for (int i = from; i < std::min(jobs, from + kChunk); ++i) {
        JobRecord j;
        j.id = "m-" + std::to_string(i + 1);
        j.queue = "training";
        j.identity = "bench";
        j.group = "g";
        j.state = i % 100 == 99 ? "succeeded" : "pending";
        if (i % 100 == 99) j.exit_code = 0;
        j.spec = "{\"command\":[\"python\",\"train.py\"],\"gpus\":1}";
        j.submit_ms = 1700000000000 + i / 4;  // four to a millisecond, as a burst has them
        j.update_ms = j.submit_ms;
        records.push_back(std::move(j));
      }
      if (auto s = (*opened)->Commit({}, records, nullptr); !s.ok()) {
        std::fprintf(stderr, "store_bench: writing jobs: %s\n", s.ToString().c_str());
        return false;
      }
    }
  }
  auto t = std::chrono::steady_clock::now();
  auto migrated = Store::Open(url);
  const double migrate_s = Seconds(t);
  if (!migrated.ok()) {
    std::fprintf(stderr, "store_bench: migrating: %s\n", migrated.status().ToString().c_str());
    return false;
  }
  auto newest = (*migrated)->ListJobs("", 3);  // the migrated store serves: newest first
  migrated->reset();
  t = std::chrono::steady_clock::now();
  auto again = Store::Open(url);
  const double open_s = Seconds(t);
  if (!again.ok() || !newest.ok() || newest->empty()) {
    std::fprintf(stderr, "store_bench: after migrating: %s\n",
                 !again.ok() ? again.status().ToString().c_str() : "no jobs listed");
    return false;
  }
  // Four jobs share the last millisecond: by the id's text m-999999 would come first.
  const std::string want = "m-" + std::to_string(jobs);
  if (newest->front().id != want) {
    std::fprintf(stderr, "store_bench: after migrating, the newest job is %s, not %s\n",
                 newest->front().id.c_str(), want.c_str());
    return false;
  }
  std::printf(
      "  upgrade to schema version 9 (the three submit-order indexes rebuilt) of a store of %d "
      "jobs: open %.3f s; an open with nothing to migrate %.3f s; newest job %s\n",
      jobs, migrate_s, open_s, newest->front().id.c_str());
  return true;
}

// The steady load of --steady (see the top): prints the figures, false on a failure.
bool Steady(const std::string& url, const std::string& path, int commits) {
  auto opened = Store::Open(url);
  if (!opened.ok()) {
    std::fprintf(stderr, "store_bench: %s\n", opened.status().ToString().c_str());
    return false;
  }
  Store& store = **opened;
  constexpr int kProgressPerCommit = 20;
  static const char* const kStates[] = {"placed", "running", "succeeded"};
  std::vector<double> lat_ms;
  lat_ms.reserve(static_cast<size_t>(commits));
  int64_t progress_rows = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < commits; ++i) {
    std::vector<JobRecord> records;
    JobRecord j;
    j.id = "j-" + std::to_string(i + 1);
    j.queue = "inference";
    j.identity = "bench";
    j.group = "g";
    j.state = "pending";
    j.spec = "{\"command\":[\"python\",\"serve.py\"],\"gpus\":1}";
    j.submit_ms = 1700000000000 + i;
    j.update_ms = j.submit_ms;
    records.push_back(j);
    // The progress of 20 jobs submitted before (placed, running, ended, in turn).
    for (int k = 0; k < kProgressPerCommit && i > 0; ++k) {
      const int step = (i + k) % 3;
      const int of = (i * 7 + k * 13) % i;
      JobRecord p;
      p.id = "j-" + std::to_string(of + 1);
      p.state = kStates[step];
      p.placement = "{\"node\":\"n" + std::to_string(of % 10000) + "\",\"devices\":[0]}";
      p.submit_ms = 1700000000000 + of;
      p.update_ms = j.submit_ms;
      if (step == 2) p.exit_code = 0;
      records.push_back(std::move(p));
      ++progress_rows;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto s = store.Commit({}, records, nullptr);
    lat_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (!s.ok()) {
      std::fprintf(stderr, "store_bench: steady commit %d: %s\n", i, s.ToString().c_str());
      return false;
    }
  }
  const double total_s = Seconds(start);
  const size_t slow = static_cast<size_t>(
      std::count_if(lat_ms.begin(), lat_ms.end(), [](double ms) { return ms > 20; }));
  std::sort(lat_ms.begin(), lat_ms.end());
  auto pct = [&](double p) {
    return lat_ms[std::min(lat_ms.size() - 1,
                           static_cast<size_t>(p * static_cast<double>(lat_ms.size())))];
  };
  int64_t left = -1;  // the log's rows at the end, read beside the store
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* q = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM job_progress", -1, &q, nullptr) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW) {
      left = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
  }
  sqlite3_close(db);
  std::printf(
      "  steady, Tidy never run: %d commits of 1 job + %d progress rows (%lld rows in all) in "
      "%.1f s = %.0f commits/s; latency p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms; %zu "
      "over 20 ms; %lld rows left in the progress log\n",
      commits, kProgressPerCommit, static_cast<long long>(progress_rows), total_s,
      commits / total_s, pct(0.50), pct(0.99), pct(0.999), lat_ms.back(), slow,
      static_cast<long long>(left));
  return true;
}

std::string Filesystem(const std::string& dir) {
  // The filesystem type matters for fsync cost; /proc/mounts names it.
  FILE* f = std::fopen("/proc/mounts", "r");
  if (f == nullptr) return "?";
  char dev[512], mnt[512], type[128];
  std::string best_mnt, best_type = "?";
  while (std::fscanf(f, "%511s %511s %127s %*[^\n]", dev, mnt, type) == 3) {
    const std::string m = mnt;
    if (dir.compare(0, m.size(), m) == 0 && m.size() > best_mnt.size()) {
      best_mnt = m;
      best_type = type;
    }
  }
  std::fclose(f);
  return best_type + " at " + best_mnt;
}

}  // namespace

int main(int argc, char** argv) {
  int commits = 10000;
  int list_jobs = 0;
  int steady = 0;
  int migrate = 0;
  std::string backends = "sqlite,postgresql";
  std::string dir;
  std::string pg_url;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "store_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--commits") {
      commits = std::atoi(next().c_str());
    } else if (a == "--backends") {
      backends = next();
    } else if (a == "--dir") {
      dir = next();
    } else if (a == "--pg-url") {
      pg_url = next();
    } else if (a == "--list-jobs") {
      list_jobs = std::atoi(next().c_str());
    } else if (a == "--steady") {
      steady = std::atoi(next().c_str());
    } else if (a == "--migrate") {
      migrate = std::atoi(next().c_str());
    } else {
      std::fprintf(stderr,
                   "usage: store_bench [--commits N] [--backends sqlite,postgresql] [--dir DIR] "
                   "[--pg-url URL] [--list-jobs N] [--steady N] [--migrate N]\n");
      return 2;
    }
  }
  if (commits <= 0 || list_jobs < 0 || steady < 0 || migrate < 0) {
    std::fprintf(stderr,
                 "store_bench: --commits must be positive, --list-jobs, --steady and --migrate "
                 "not negative\n");
    return 2;
  }
  bool own_dir = false;
  if (dir.empty()) {
    char tmpl[] = "/tmp/tessera-store-bench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return 1;
    dir = tmpl;
    own_dir = true;
  }
  utsname u{};
  uname(&u);
  std::printf("store_bench: %d commits per backend, each 1 event + 1 job record, one thread\n",
              commits);
  std::printf("host: %s %s, %ld cores\n", u.sysname, u.release, sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("%-11s %12s %10s %10s %10s  %s\n", "backend", "commits/s", "p50 ms", "p99 ms",
              "max ms", "conditions");
  int rc = 0;
  std::stringstream list(backends);
  std::string b;
  std::unique_ptr<tessera::testing::PgServer> server;
  while (std::getline(list, b, ',')) {
    std::string url, conditions;
    if (b == "sqlite") {
      url = "sqlite:" + dir + "/bench.db";
      std::filesystem::remove(dir + "/bench.db");
      conditions = "WAL, synchronous=FULL, file on " + Filesystem(dir);
    } else if (b == "postgresql") {
      if (pg_url.empty()) {
        tessera::testing::PgServer::Options o;
        o.fsync = true;
        auto started = tessera::testing::PgServer::Start(o);
        if (!started.ok()) {
          std::fprintf(stderr, "store_bench: %s\n", started.status().ToString().c_str());
          rc = 1;
          continue;
        }
        server = std::move(*started);
        auto created = server->CreateDatabase("bench");
        if (!created.ok()) {
          std::fprintf(stderr, "store_bench: %s\n", created.status().ToString().c_str());
          rc = 1;
          continue;
        }
        url = *created;
        conditions = "PostgreSQL " + server->version() +
                     " private server over TCP 127.0.0.1, fsync=on, synchronous_commit=on, "
                     "data on " +
                     Filesystem(server->dir());
      } else {
        url = pg_url;
        conditions = "server at " + pg_url;
      }
    } else {
      std::fprintf(stderr, "store_bench: unknown backend '%s'\n", b.c_str());
      return 2;
    }
    Figures f;
    if (!Bench(url, commits, &f)) {
      rc = 1;
      continue;
    }
    std::printf("%-11s %12.0f %10.3f %10.3f %10.3f  %s\n", b.c_str(), f.per_second, f.p50_ms,
                f.p99_ms, f.max_ms, conditions.c_str());
    if (list_jobs > 0) {
      // SQLite: a file of its own; PostgreSQL: the same database, the commits' jobs listed too.
      if (!ListAfterCycle(b == "sqlite" ? "sqlite:" + dir + "/list.db" : url, list_jobs)) rc = 1;
    }
    if (migrate > 0) {
      // SQLite: a file of its own; PostgreSQL: a database of its own where the bench has a server.
      std::string murl = "sqlite:" + dir + "/migrate.db";
      if (b == "postgresql") {
        auto created = server ? server->CreateDatabase("migrate") : Result<std::string>(url);
        murl = created.ok() ? *created : "";
      }
      if (murl.empty() || !Migrate(murl, migrate)) rc = 1;
    }
    if (steady > 0 && b == "sqlite" &&
        !Steady("sqlite:" + dir + "/steady.db", dir + "/steady.db", steady)) {
      rc = 1;
    }
    std::fflush(stdout);
  }
  server.reset();
  if (own_dir) std::filesystem::remove_all(dir);
  return rc;
}
