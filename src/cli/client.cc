#include "cli/client.h"

#include <httplib.h>

namespace tessera::cli {

ClientReply HttpCall(const std::string& url, const std::string& token, const std::string& method,
                     const std::string& path, const std::string& body) {
  ClientReply out;
  httplib::Client c(url);
  c.set_connection_timeout(5);
  c.set_tcp_nodelay(true);
  c.set_read_timeout(30);
  httplib::Headers h;
  if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
  httplib::Result r = method == "POST" ? c.Post(path.c_str(), h, body, "application/json")
                     : method == "PUT"  ? c.Put(path.c_str(), h, body, "application/octet-stream")
                                        : c.Get(path.c_str(), h);
  if (!r) {
    out.error = "cannot reach " + url + " (" + httplib::to_string(r.error()) + ")";
    return out;
  }
  out.status = r->status;
  out.body = r->body;
  if (r->status >= 400) {
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    out.error = !j.is_discarded() && j.contains("error") ? j["error"].get<std::string>() : r->body;
  }
  return out;
}

}  // namespace tessera::cli
