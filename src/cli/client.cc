#include "cli/client.h"

#include <httplib.h>

#include <vector>

namespace tessera::cli {

namespace {

ClientReply CallOne(const std::string& url, const std::string& token, const std::string& method,
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
    out.standby = r->status == 503 && !j.is_discarded() && j.value("role", "") == "standby";
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

ClientReply HttpCall(const std::string& urls, const std::string& token, const std::string& method,
                     const std::string& path, const std::string& body) {
  // Several servers ("http://a:8080,http://b:8080"): the first that answers and is not a
  // standby. A request that reached a server is never sent to another (it may have landed).
  ClientReply last;
  std::vector<std::string> list = SplitUrls(urls);
  if (list.empty()) list.push_back(urls);
  for (const std::string& url : list) {
    last = CallOne(url, token, method, path, body);
    if (last.status != 0 && !last.standby) return last;
  }
  return last;
}

}  // namespace tessera::cli
