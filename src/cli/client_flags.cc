// The flags and environment every server-talking command shares (cli/client.h).
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/login.h"

namespace tessera::cli {

using Json = nlohmann::json;

void AddClientFlags(CLI::App* cmd, ClientOptions* o) {
  cmd->add_option("--url", o->url, "server URL (default: $TESSERA_URL)");
  // Refused when given (Resolve): a token on a command line is readable by every process on the
  // host (/proc/PID/cmdline). Kept as an option to say so, hidden from --help.
  cmd->add_option("--token", o->token_on_command_line,
                  "refused: use --token-file or $TESSERA_TOKEN_FILE")
      ->group("");
  cmd->add_option("--token-file", o->token_file,
                  "file holding the bearer token (default: $TESSERA_TOKEN_FILE)");
  cmd->add_option("--ca", o->tls.ca_file,
                  "CA file that signed an https:// server's certificate (default: $TESSERA_CA)");
  cmd->add_option(
      "--tls-cert", o->tls.cert_file,
      "client certificate (PEM) for a server that asks for one (default: $TESSERA_TLS_CERT)");
  cmd->add_option("--tls-key", o->tls.key_file,
                  "private key of --tls-cert (default: $TESSERA_TLS_KEY)");
  cmd->add_flag("--json", o->json, "print JSON for scripts");
}

bool Resolve(ClientOptions* o) {
  auto env = [](const char* name) {
    return std::getenv(name) ? std::string(std::getenv(name)) : std::string();
  };
  if (!o->token_on_command_line.empty()) {
    std::cerr << "tessera: --token puts the token where every process on this host reads it "
                 "(/proc/PID/cmdline); use --token-file FILE or $TESSERA_TOKEN_FILE (or "
                 "$TESSERA_TOKEN)\n";
    return false;
  }
  if (o->url.empty()) o->url = env("TESSERA_URL");
  if (o->tls.cert_file.empty()) o->tls.cert_file = env("TESSERA_TLS_CERT");
  if (o->tls.key_file.empty()) o->tls.key_file = env("TESSERA_TLS_KEY");
  if (o->tls.cert_file.empty() != o->tls.key_file.empty()) {
    std::cerr << "tessera: --tls-cert and --tls-key go together\n";
    return false;
  }
  if (Status st = net::ResolveCredentials(o->token_file, &o->token, &o->tls); !st.ok()) {
    std::cerr << "tessera: " << st.message() << "\n";
    return false;
  }
  if (o->url.empty()) {
    std::cerr << "tessera: no server: set TESSERA_URL or pass --url\n";
    return false;
  }
  std::string urls;  // each checked, a trailing "/" dropped
  for (const std::string& given : SplitUrls(o->url)) {
    auto u = net::ServerUrl(given);
    if (!u.ok()) {
      std::cerr << "tessera: " << u.status().message() << "\n";
      return false;
    }
    urls += (urls.empty() ? "" : ",") + *u;
  }
  o->url = urls;
  if (o->token.empty()) {  // the login `tessera login` kept, if any (refreshed when due)
    auto login = LoginToken(o->tls);
    if (!login.ok() && login.status().code() != StatusCode::kNotFound) {
      std::cerr << "tessera: " << login.status().message() << "\n";
      return false;
    }
    if (login.ok()) o->token = *login;
  }
  if (o->token.empty()) {
    std::cerr << "tessera: no token: set TESSERA_TOKEN_FILE or TESSERA_TOKEN, pass --token-file, "
                 "or sign in with tessera login\n";
    return false;
  }
  return true;
}

// Calls the server; prints errors; returns the parsed body or a discarded JSON.
Json Call(const ClientOptions& o, const std::string& method, const std::string& path,
          int* exit_code, const std::string& body, CallOptions call) {
  call.urls = o.url;
  call.token = o.token;
  call.tls = o.tls;
  ClientReply r = HttpCall(call, method, path, body);
  if (r.status == 0 || r.status >= 400) {
    std::cerr << "tessera: " << r.error
              << (r.status ? " (HTTP " + std::to_string(r.status) + ")" : "") << "\n";
    *exit_code = r.status >= 400 && r.status < 500 ? kExitBadInput : 1;
    return Json(Json::value_t::discarded);
  }
  Json j = Json::parse(r.body, nullptr, false);
  if (j.is_discarded()) j = r.body;
  return j;
}

}  // namespace tessera::cli
