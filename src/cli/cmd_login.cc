// `tessera login` and the kept login's token (login.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "auth/jwt.h"
#include "cli/client.h"
#include "cli/login.h"
#include "net/http_client.h"

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

// "https://host:port/a/b" -> ("https://host:port", "/a/b").
std::pair<std::string, std::string> SplitUrl(const std::string& url) {
  const size_t slash = url.find('/', url.find("//") + 2);
  if (slash == std::string::npos) return {url, "/"};
  return {url.substr(0, slash), url.substr(slash)};
}

// GET (params empty) or a form POST to `url`; the JSON answer (also for 4xx: OAuth errors).
Result<Json> Exchange(const std::string& url, const net::ClientTls& tls,
                      const httplib::Params* form = nullptr) {
  if (!net::IsHttpUrl(url)) return Status::InvalidArgument("'" + url + "' is not an http(s) URL");
  auto [base, path] = SplitUrl(url);
  auto c = net::NewHttpClient(base, tls);
  c->set_connection_timeout(10);
  c->set_read_timeout(30);
  auto r = form ? c->Post(path, *form) : c->Get(path);
  if (!r) return Status::Internal(url + ": " + httplib::to_string(r.error()));
  Json j = Json::parse(r->body, nullptr, false);
  if (!j.is_object()) {
    return Status::Internal(url + " answered " + std::to_string(r->status) + " without JSON");
  }
  if (r->status >= 500) return Status::Internal(url + " answered " + std::to_string(r->status));
  return j;
}

// Writes `login` to `path` with mode 0600 (through a file beside it, renamed over it).
Status SaveLogin(const std::string& path, const Json& login) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  const std::string tmp = path + ".new";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return Status::Internal("cannot write '" + tmp + "'");
  fchmod(fd, 0600);  // a file left there before with other bits
  const std::string text = login.dump(2) + "\n";
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0)
    return Status::Internal("cannot write '" + path + "'");
  return Status::Ok();
}

int64_t ExpiryMs(const std::string& id_token) {
  auto jwt = auth::ParseJwt(id_token);
  if (!jwt.ok() || !jwt->claims.contains("exp") || !jwt->claims["exp"].is_number()) return 0;
  return static_cast<int64_t>(jwt->claims["exp"].get<double>()) * 1000;
}

// The device code flow against the provider the server at `url` names; the login to keep.
Result<Json> DeviceLogin(const std::string& url, const net::ClientTls& tls) {
  auto cfg = Exchange(SplitUrls(url).front() + "/v1/auth/config", tls);
  if (!cfg.ok()) return cfg.status();
  if (!cfg->contains("oidc") || !(*cfg)["oidc"].is_object())
    return Status::FailedPrecondition(
        "the server accepts no identity provider (no oidc: in its config)");
  const Json oidc = (*cfg)["oidc"];
  const std::string issuer = oidc.value("issuer", "");
  const std::string client_id = oidc.value("client_id", "");
  std::string base = issuer;
  while (!base.empty() && base.back() == '/') base.pop_back();
  auto disc = Exchange(base + "/.well-known/openid-configuration", tls);
  if (!disc.ok()) return disc.status();
  const std::string device_ep = disc->value("device_authorization_endpoint", "");
  const std::string token_ep = disc->value("token_endpoint", "");
  if (device_ep.empty())
    return Status::FailedPrecondition("the provider '" + issuer + "' offers no device code flow");
  httplib::Params ask = {{"client_id", client_id}, {"scope", oidc.value("scopes", "openid")}};
  auto dev = Exchange(device_ep, tls, &ask);
  if (!dev.ok()) return dev.status();
  if (!dev->contains("device_code"))
    return Status::Internal("the provider refused the device code request: " + dev->dump());
  std::cout << "To sign in, open " << dev->value("verification_uri", "") << " and enter the code "
            << dev->value("user_code", "") << "\n";
  if (dev->contains("verification_uri_complete"))
    std::cout << "(or open " << (*dev)["verification_uri_complete"].get<std::string>() << ")\n";
  std::cout << std::flush;
  int interval_s = dev->value("interval", 5);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(dev->value("expires_in", 600));
  httplib::Params poll = {{"grant_type", "urn:ietf:params:oauth:grant-type:device_code"},
                          {"device_code", (*dev)["device_code"].get<std::string>()},
                          {"client_id", client_id}};
  // TESSERA_LOGIN_POLL_MS: how often to ask meanwhile (tests), instead of the provider's interval.
  const char* poll_ms = std::getenv("TESSERA_LOGIN_POLL_MS");
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(poll_ms ? std::chrono::milliseconds(std::atoi(poll_ms))
                                        : std::chrono::milliseconds(interval_s * 1000));
    auto t = Exchange(token_ep, tls, &poll);
    if (!t.ok()) return t.status();
    if (t->contains("id_token")) {
      return Json{{"server", url},
                  {"issuer", issuer},
                  {"client_id", client_id},
                  {"token_endpoint", token_ep},
                  {"id_token", (*t)["id_token"]},
                  {"refresh_token", t->value("refresh_token", "")}};
    }
    const std::string err = t->value("error", "");
    if (err == "slow_down") {
      interval_s += 5;
    } else if (err != "authorization_pending") {
      return Status::PermissionDenied("sign-in failed: " + err + " " +
                                      t->value("error_description", ""));
    }
  }
  return Status::FailedPrecondition("sign-in not completed before the code expired");
}

}  // namespace

std::string LoginFilePath() {
  if (const char* f = std::getenv("TESSERA_LOGIN_FILE"); f && *f) return f;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.config/tessera/login.json";
}

Result<std::string> LoginToken(const net::ClientTls& tls) {
  const std::string path = LoginFilePath();
  std::ifstream in(path);
  if (!in) return Status::NotFound("no login at '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  Json login = Json::parse(ss.str(), nullptr, false);
  if (!login.is_object() || !login.contains("id_token"))
    return Status::InvalidArgument("'" + path + "' is not a login: run tessera login");
  std::string token = login["id_token"];
  if (ExpiryMs(token) - 60'000 > NowMs()) return token;
  const std::string refresh = login.value("refresh_token", "");
  if (refresh.empty()) return Status::Unauthenticated("the login expired: run tessera login");
  httplib::Params form = {{"grant_type", "refresh_token"},
                          {"refresh_token", refresh},
                          {"client_id", login.value("client_id", "")}};
  auto t = Exchange(login.value("token_endpoint", ""), tls, &form);
  if (!t.ok()) return t.status();
  if (!t->contains("id_token")) {
    return Status::Unauthenticated("the login could not be refreshed (" + t->value("error", "") +
                                   "): run tessera login");
  }
  login["id_token"] = (*t)["id_token"];
  if (t->contains("refresh_token")) login["refresh_token"] = (*t)["refresh_token"];
  if (Status st = SaveLogin(path, login); !st.ok()) return st;
  return login["id_token"].get<std::string>();
}

void RegisterLoginCommand(CLI::App& app, CommandContext& ctx) {
  struct Opts {
    ClientOptions client;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "login",
      "Sign in at the server's identity provider (device code flow); the login is kept "
      "in $TESSERA_LOGIN_FILE (default ~/.config/tessera/login.json, mode 0600)");
  cmd->add_option("--url", o->client.url, "server URL (default: $TESSERA_URL)");
  cmd->callback([o, &ctx] {
    net::ClientTls tls;
    std::string unused;
    if (Status st = net::ResolveCredentials("", &unused, &tls); !st.ok()) {
      std::cerr << "tessera: " << st.message() << "\n";
      ctx.exit_code = kExitBadInput;
      return;
    }
    std::string url = o->client.url;
    if (url.empty() && std::getenv("TESSERA_URL")) url = std::getenv("TESSERA_URL");
    if (url.empty()) {
      std::cerr << "tessera: no server: set TESSERA_URL or pass --url\n";
      ctx.exit_code = kExitBadInput;
      return;
    }
    auto login = DeviceLogin(url, tls);
    if (!login.ok()) {
      std::cerr << "tessera login: " << login.status().message() << "\n";
      ctx.exit_code = 1;
      return;
    }
    const std::string path = LoginFilePath();
    if (Status st = SaveLogin(path, *login); !st.ok()) {
      std::cerr << "tessera login: " << st.message() << "\n";
      ctx.exit_code = 1;
      return;
    }
    CallOptions call;
    call.urls = url;
    call.token = (*login)["id_token"];
    call.tls = tls;
    ClientReply r = HttpCall(call, "GET", "/v1/whoami");
    Json me = Json::parse(r.body, nullptr, false);
    if (r.status != 200 || !me.is_object()) {
      std::cerr << "tessera login: signed in at the provider, but the server refuses the token: "
                << r.error << "\n";
      ctx.exit_code = 1;
      return;
    }
    std::cout << "Signed in as " << me.value("name", "?") << " (" << me.value("role", "?")
              << ", groups " << me.value("groups", Json::array()).dump() << "); login kept in "
              << path << "\n";
  });
}

}  // namespace tessera::cli
