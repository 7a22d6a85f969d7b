// `tessera serve`'s flags, and how a server waits as a standby until it leads the store
// (cmd_engine_leader.cc). Used by `serve` and `up` (cmd_engine.cc).
#pragma once

#include <cstdint>
#include <string>

#include "api/server.h"
#include "common/log.h"
#include "store/store.h"

namespace tessera::cli {

// The server's own log lines (its request log is the component "http": net/http_server.h).
const log::Logger& ServeLog();

// `tessera serve`'s flags.
struct ServeFlags {
  std::string config;
  std::string data;
  std::string listen = "127.0.0.1:8080";
  std::string store;      // postgresql://... ("" : SQLite under data)
  std::string advertise;  // "" : http(s)://listen
  std::string tls_cert;   // HTTPS when set, with tls_key
  std::string tls_key;
  std::string tls_client_ca;  // mutual TLS: clients must present a certificate it signed
  int threads = 0;            // 0: ApiServerOptions' default (one per core)
  int64_t max_connections = 0;
  int64_t max_connections_per_peer = 512;
  bool limit_loopback_peers = false;
  // `tessera up`: the data directory is this server's alone; when another server holds it, say
  // so and exit rather than wait as its standby.
  bool sole = false;
  // SIGINT/SIGTERM stop the server (false: the caller handles them, and stops it itself).
  bool stop_on_signals = true;

  std::string Scheme() const { return tls_cert.empty() ? "http://" : "https://"; }
  api::ApiServerOptions ServerOptions() const {
    api::ApiServerOptions o;
    o.stop_on_signals = stop_on_signals;  // SIGINT/SIGTERM end Run()
    o.tls_cert_file = tls_cert;
    o.tls_key_file = tls_key;
    o.tls_client_ca_file = tls_client_ca;
    if (threads > 0) o.io_threads = threads;
    o.max_connections = max_connections;
    o.max_connections_per_peer = max_connections_per_peer;
    o.limit_loopback_peers = limit_loopback_peers;
    return o;
  }
};

enum class Lead { kLeads, kStopped, kRefused };

// Waits as a standby until this server holds the store's leader lease (answering health and
// naming the leader meanwhile). kStopped when a signal (or an error) came first: the server
// exits, and does not lead even if the lease came at the same moment. kRefused (flags.sole)
// when another server holds the store: said, and nothing waited for. `*listener`: the standby's
// listening socket when it came to lead (the leader serves on it, so that clients connecting
// meanwhile wait in its backlog and none is refused), else -1.
Lead AwaitLead(store::Store& store, const std::string& advertise, const std::string& host, int port,
               const ServeFlags& flags, int* listener);

}  // namespace tessera::cli
