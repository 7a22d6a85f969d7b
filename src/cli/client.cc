#include "cli/client.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <thread>
#include <vector>

#include "net/http_client.h"

namespace tessera::cli {

namespace {

// Whether the server at `url` speaks the other scheme: an https:// server asked in plain HTTP
// closes the connection (httplib's "Read"), an http:// one asked in TLS fails the handshake. A
// probe without credentials (GET /v1/health, the certificate not checked: only the scheme is
// learnt) says which; "" when it is neither.
std::string SchemeHint(const std::string& url) {
  const bool https = url.rfind("https://", 0) == 0;
  if (!https && url.rfind("http://", 0) != 0) return "";
  const std::string rest = url.substr(https ? 8 : 7);
  const std::string other = (https ? "http://" : "https://") + rest;
  net::ClientTls probe_tls;
  probe_tls.insecure = true;
  auto probe = net::NewHttpClient(other, probe_tls);
  probe->set_connection_timeout(2);
  probe->set_read_timeout(2);
  if (!probe->Get("/v1/health")) return "";
  return https ? ": that server speaks plain HTTP, not HTTPS; use " + other
               : ": that server speaks HTTPS; use " + other + " (and TESSERA_CA for its CA)";
}

ClientReply CallOne(const std::string& url, const CallOptions& o, const std::string& method,
                    const std::string& path, const std::string& body) {
  const std::string& token = o.token;
  ClientReply out;
  auto client = net::NewHttpClient(url, o.tls);
  httplib::Client& c = *client;
  c.set_connection_timeout(5);
  c.set_tcp_nodelay(true);
  c.set_read_timeout(30);
  httplib::Headers h;
  if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
  for (const auto& [k, v] : o.headers) h.emplace(k, v);
  httplib::Result r = method == "POST"  ? c.Post(path.c_str(), h, body, "application/json")
                      : method == "PUT" ? c.Put(path.c_str(), h, body, "application/octet-stream")
                                        : c.Get(path.c_str(), h);
  if (!r) {
    out.error = "cannot reach " + url + " (" + httplib::to_string(r.error()) + ")";
    if (r.error() == httplib::Error::SSLServerVerification) {
      out.error += ": its certificate is not trusted; set TESSERA_CA to the CA file that signed it";
    } else if (r.error() != httplib::Error::Connection) {
      out.error += SchemeHint(url);
    }
    return out;
  }
  out.status = r->status;
  out.body = r->body;
  if (r->status >= 400) {
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    out.error = !j.is_discarded() && j.contains("error") && j["error"].is_string()
                    ? j["error"].get<std::string>()
                    : r->body;
    out.standby = r->status == 503 && j.is_object() && j.contains("role") && j["role"] == "standby";
  }
  return out;
}

}  // namespace

std::vector<std::string> SplitUrls(const std::string& urls) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= urls.size()) {
    size_t comma = urls.find(',', start);
    if (comma == std::string::npos) comma = urls.size();
    std::string u = urls.substr(start, comma - start);
    while (!u.empty() && u.front() == ' ') u.erase(u.begin());
    while (!u.empty() && u.back() == ' ') u.pop_back();
    if (!u.empty()) out.push_back(u);
    start = comma + 1;
  }
  return out;
}

ClientReply HttpCall(const CallOptions& o, const std::string& method, const std::string& path,
                     const std::string& body) {
  // Several servers ("http://a:8080,http://b:8080"): the first that answers and is not a
  // standby. A request that reached a server is never sent to another (it may have landed),
  // unless it is safe to repeat: a GET, or a request with an Idempotency-Key (a repeat returns
  // the job the first one made). Such a request that a server failed (5xx: a standby, a leader
  // deposed or fenced meanwhile, which may answer 500 or 503) goes on to the next server, the
  // same key with it; rounds are repeated, until retry_for_ms, only while some server was
  // unreachable or unavailable (503): a 500 from every server is an answer, not a failover.
  bool idempotent = method == "GET" || o.repeatable;
  for (const auto& [k, v] : o.headers) idempotent = idempotent || k == "Idempotency-Key";
  std::vector<std::string> list = SplitUrls(o.urls);
  if (list.empty()) list.push_back(o.urls);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.retry_for_ms);
  ClientReply last, answered;
  for (int round = 0;; ++round) {
    bool unavailable = false;
    for (const std::string& url : list) {
      last = CallOne(url, o, method, path, body);
      if (last.status != 0) answered = last;
      const bool failed_over = last.status == 0 || last.standby || last.status == 503;
      if (!failed_over && !(idempotent && last.status >= 500)) return last;
      if (!idempotent && last.status != 0 && !last.standby) return last;
      unavailable = unavailable || failed_over;
    }
    if (!idempotent || !unavailable || std::chrono::steady_clock::now() >= until) {
      // The most telling failure: a server's own answer over "cannot reach" another.
      return answered.status != 0 ? answered : last;
    }
    if (round == 0 && o.retry_for_ms >= 5000) {  // not silent for half a minute
      std::cerr << "tessera: " << (last.error.empty() ? "no server answered" : last.error)
                << "; trying again for up to " << o.retry_for_ms / 1000 << "s"
                << (o.headers.empty() ? "" : " (the same request: it is done once)") << "\n";
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::min(2000, 200 << std::min(round, 3))));
  }
}

std::string NewIdempotencyKey() {
  std::random_device rd;  // the kernel's entropy
  std::string out;
  for (int i = 0; i < 4; ++i) {
    char part[9];
    std::snprintf(part, sizeof part, "%08x", static_cast<unsigned>(rd()));
    out += part;
  }
  return out;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void CallAndPrint(const ClientOptions& co, const std::string& method, const std::string& path,
                  int* exit_code, const std::function<void(nlohmann::json&)>& print) {
  nlohmann::json j = Call(co, method, path, exit_code);
  if (j.is_discarded()) return;
  if (co.json) return void(std::cout << j.dump(2) << "\n");
  print(j);
  // With the engine busy, a view is its last rendering, of any age: a listing 20 s old looked
  // current (a new user). A second or more is said.
  if (j.is_object() && j.contains("stale_ms") && j["stale_ms"].is_number_integer() &&
      j["stale_ms"].get<int64_t>() >= 1000) {
    std::cerr << "(as of " << j["stale_ms"].get<int64_t>() / 1000
              << " s ago: the server was busy and answered with its last view)\n";
  }
}

}  // namespace tessera::cli
