// The leader takeover: a `tessera serve` whose store another server leads waits here as a
// standby until the lease is its own.
#include "cli/cmd_engine_leader.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace tessera::cli {

// The server's own log lines (its request log is the component "http": net/http_server.h).
const log::Logger& ServeLog() {
  static const log::Logger logger("serve");
  return logger;
}

// See cmd_engine_leader.h.
Lead AwaitLead(store::Store& store, const std::string& advertise, const std::string& host, int port,
               const ServeFlags& flags, int* listener) {
  *listener = -1;
  auto lead = store.TryLead(advertise);
  if (!lead.ok()) {
    ServeLog().Error(lead.status().message());
    return Lead::kStopped;
  }
  if (*lead) return Lead::kLeads;
  auto now = store.Leader();
  const std::string leader = now.ok() && !now->holder.empty() ? now->holder : "another server";
  if (flags.sole) {
    ServeLog().Error("another Tessera server (" + leader + ") holds the data directory " +
                     flags.data + " (" + store.Describe() +
                     "); stop it first, or give this one another --data and --listen");
    return Lead::kRefused;
  }
  api::StandbyServer standby(&store, flags.ServerOptions());
  auto bound = standby.Bind(host, port);
  if (!bound.ok()) {
    ServeLog().Error(bound.status().message());
    return Lead::kStopped;
  }
  ServeLog().Info("standby on " + flags.Scheme() + host + ":" + std::to_string(*bound) + ": " +
                      leader + " leads " + store.Describe() + "; waiting for the lease",
                  {{"port", *bound}, {"leader", leader}});
  std::mutex mu;
  std::condition_variable wake;
  bool done = false;  // guarded by mu
  std::atomic<bool> leading{false};
  std::thread poll([&] {
    std::unique_lock<std::mutex> l(mu);
    while (!wake.wait_for(l, std::chrono::milliseconds(500), [&] { return done; })) {
      l.unlock();
      auto took = store.TryLead(advertise);
      l.lock();
      if (took.ok() && *took) {
        leading.store(true);
        standby.Handover();
        return;
      }
    }
  });
  standby.Run();
  {
    std::lock_guard<std::mutex> l(mu);
    done = true;
  }
  wake.notify_all();
  poll.join();
  if (standby.signalled()) return Lead::kStopped;  // even if the lease came meanwhile
  if (!leading.load()) return Lead::kStopped;
  *listener = standby.ReleaseListener();
  return Lead::kLeads;
}

}  // namespace tessera::cli
