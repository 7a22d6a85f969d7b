// A small HTTP client for the `tessera` user commands: the server and token come from
// TESSERA_URL and TESSERA_TOKEN_FILE or TESSERA_TOKEN (or --url / --token-file; never a token on
// the command line). TESSERA_URL may list several servers, comma-separated: the call goes to the
// first that answers and is not a standby. https:// servers are verified against TESSERA_CA (or the
// system's CAs).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "net/client_tls.h"

namespace tessera::cli {

struct ClientReply {
  int status = 0;  // HTTP status, 0 when the server could not be reached
  std::string body;
  std::string error;     // a message for people when status is 0 or >= 400
  bool standby = false;  // 503 from a standby server (another one leads)
};

struct CallOptions {
  std::string urls;    // one URL or several, comma-separated
  std::string token;   // bearer token; "" sends none
  net::ClientTls tls;  // for https:// URLs
  std::vector<std::pair<std::string, std::string>> headers;
  // A request that reached a server is sent again only when it is safe to repeat: a GET, one
  // with an Idempotency-Key header, or one marked `repeatable`. Then a server's failure (5xx: a
  // standby, a deposed or fenced leader) sends it on to the next URL with the same headers, and it
  // is retried, over every URL, until `retry_for_ms` passed while some server was unreachable or
  // unavailable (503).
  int retry_for_ms = 0;
  // The request changes nothing more when repeated (a cancel: a second one finds the job
  // cancelling or ended), so it may go to another server after it reached one.
  bool repeatable = false;
};

// "http://a:8080, http://b:8080" -> each URL, trimmed.
std::vector<std::string> SplitUrls(const std::string& urls);

ClientReply HttpCall(const CallOptions& options, const std::string& method, const std::string& path,
                     const std::string& body = "");

// A fresh random key (128 bits, hex) for one invocation's Idempotency-Key.
std::string NewIdempotencyKey();

// The wall clock: milliseconds since the Unix epoch.
int64_t NowMs();

// The flags every server-talking command takes, and their resolution from the environment.
struct ClientOptions {
  std::string url;
  std::string token;
  std::string token_file;
  std::string token_on_command_line;  // --token, refused (Resolve)
  net::ClientTls tls;
  bool json = false;
};
}  // namespace tessera::cli
namespace CLI {
class App;
}
namespace tessera::cli {
void AddClientFlags(CLI::App* cmd, ClientOptions* o);
// Fills url and token from TESSERA_URL, TESSERA_TOKEN(_FILE), TESSERA_CA; prints what is missing.
bool Resolve(ClientOptions* o);
// Calls the server; prints errors (and sets *exit_code); returns the parsed body or a discarded
// JSON.
nlohmann::json Call(const ClientOptions& o, const std::string& method, const std::string& path,
                    int* exit_code, const std::string& body = "", CallOptions call = {});
// Calls the server and prints its answer: whole with --json, else as `print` puts it for people,
// then how old the view is where the server answered with an older one.
void CallAndPrint(const ClientOptions& co, const std::string& method, const std::string& path,
                  int* exit_code, const std::function<void(nlohmann::json&)>& print);

}  // namespace tessera::cli
