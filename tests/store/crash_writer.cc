// store_crash_writer URL: commits forever and reports each acknowledged commit on stdout, for
// the crash test, which SIGKILLs it at random moments.
//
// Commit i appends "job.submitted" and "job.placed" for job i (numbered on from the jobs
// already in the store) and inserts job i's record; every third commit also updates job i-1.
// After Commit returns OK it writes one line "i seq_submitted seq_placed\n" with a single
// write(2) (atomic on a pipe). Exits 2 on any error.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "crash_records.h"
#include "store/store.h"

int main(int argc, char** argv) {
  using tessera::store::Store;
  if (argc != 2) {
    std::fprintf(stderr, "usage: store_crash_writer URL\n");
    return 2;
  }
  auto store = Store::Open(argv[1]);
  if (!store.ok()) {
    std::fprintf(stderr, "crash_writer: %s\n", store.status().ToString().c_str());
    return 2;
  }
  auto jobs = (*store)->LoadJobs();
  if (!jobs.ok()) {
    std::fprintf(stderr, "crash_writer: %s\n", jobs.status().ToString().c_str());
    return 2;
  }
  for (int64_t i = static_cast<int64_t>(jobs->size());; ++i) {
    std::vector<tessera::store::JobRecord> records = {tessera::store::crashtest::Job(i, false)};
    if (i % 3 == 0 && i > 0) records.push_back(tessera::store::crashtest::Job(i - 1, true));
    std::vector<int64_t> seqs;
    auto s = (*store)->Commit(tessera::store::crashtest::Events(i), records, &seqs);
    if (!s.ok() || seqs.size() != 2) {
      std::fprintf(stderr, "crash_writer: commit %lld: %s\n", static_cast<long long>(i),
                   s.ToString().c_str());
      return 2;
    }
    const std::string line =
        std::to_string(i) + " " + std::to_string(seqs[0]) + " " + std::to_string(seqs[1]) + "\n";
    if (write(1, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return 2;
  }
}
