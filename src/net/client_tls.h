// What the HTTP clients (the `tessera` commands, the agent) share: HTTPS settings, URL checks and
// secrets read from files (--token-file). The client itself: net/http_client.h.
#pragma once

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "common/read_file.h"
#include "common/status.h"

namespace tessera::net {

struct ClientTls {
  std::string ca_file;    // PEM CAs the server's certificate must chain to ("" : the system's)
  std::string cert_file;  // a client certificate and key, for servers that ask (mutual TLS)
  std::string key_file;
  bool insecure = false;  // no verification of the server: for tests only
};

// "http://..." or "https://...": the schemes the clients speak.
inline bool IsHttpUrl(const std::string& u) {
  return (u.rfind("http://", 0) == 0 && u.size() > 7) ||
         (u.rfind("https://", 0) == 0 && u.size() > 8);
}

// A control plane's URL as given (TESSERA_URL, --url, --server), checked: "http://host:port" or
// "https://host[:port]" (an IPv6 host in brackets), with at most a trailing "/", which is
// dropped. Anything else (another scheme, no scheme, a path) is refused naming the URL, before a
// request is sent.
inline Result<std::string> ServerUrl(std::string u) {
  const Status bad = Status::InvalidArgument(
      "server URL '" + u + "' must look like http://host:port or https://host:port");
  if (!u.empty() && u.back() == '/') u.pop_back();
  const size_t scheme = u.rfind("https://", 0) == 0 ? 8 : u.rfind("http://", 0) == 0 ? 7 : 0;
  if (scheme == 0 || u.size() == scheme) return bad;
  const std::string rest = u.substr(scheme);
  size_t colon = rest.rfind(':');
  if (rest.front() == '[') {  // [v6]:port
    const size_t close = rest.find(']');
    if (close == std::string::npos) return bad;
    colon = close + 1 < rest.size() ? close + 1 : std::string::npos;
    if (colon != std::string::npos && rest[colon] != ':') return bad;
  }
  const std::string host = rest.substr(0, colon);
  if (host.empty() || host.find_first_of("/?#@ \t") != std::string::npos) return bad;
  if (rest.front() != '[' && host.find(':') != std::string::npos) return bad;  // a:1:2, ::1
  if (colon != std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) == 0 ||
        std::stoi(port) > 65535)
      return bad;
  }
  return u;
}

// The CA file a client was given, readable and holding a PEM certificate: "cannot reach ...
// (SSLLoadingCerts)" named neither the file nor what is wrong with it.
inline Status CheckCaFile(const std::string& path) {
  const Result<std::string> read = ReadWholeFile(path);  // a directory too: EISDIR
  if (!read.ok()) return Status::InvalidArgument("cannot read CA file '" + path + "'");
  const std::string& text = *read;
  if (text.find("-----BEGIN CERTIFICATE-----") == std::string::npos)
    return Status::InvalidArgument("CA file '" + path + "' holds no PEM certificate");
  return Status::Ok();
}

// A secret kept in a file (--token-file): its first line, without surrounding white space.
inline Result<std::string> ReadSecretFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument("cannot read token file '" + path + "'");
  std::string line;
  std::getline(in, line);
  const size_t b = line.find_first_not_of(" \t\r");
  const size_t e = line.find_last_not_of(" \t\r");
  if (b == std::string::npos) return Status::InvalidArgument("token file '" + path + "' is empty");
  return line.substr(b, e - b + 1);
}

// A client's credentials from its flags, else the environment, in one place for the CLI and
// the agent: the token from `token_file` (or TESSERA_TOKEN_FILE when neither flag is given),
// else `token`, else TESSERA_TOKEN; the CA from TESSERA_CA unless given;
// TESSERA_INSECURE_TLS=1 (tests only) turns off server verification. An unreadable token file
// is an error naming it.
inline Status ResolveCredentials(std::string token_file, std::string* token, ClientTls* tls) {
  auto env = [](const char* name) {
    return std::getenv(name) != nullptr ? std::string(std::getenv(name)) : std::string();
  };
  if (token_file.empty() && token->empty()) token_file = env("TESSERA_TOKEN_FILE");
  if (!token_file.empty()) {
    auto t = ReadSecretFile(token_file);
    if (!t.ok()) return t.status();
    *token = *t;
  }
  if (token->empty()) *token = env("TESSERA_TOKEN");
  if (tls->ca_file.empty()) tls->ca_file = env("TESSERA_CA");
  tls->insecure = env("TESSERA_INSECURE_TLS") == "1";
  if (!tls->ca_file.empty()) return CheckCaFile(tls->ca_file);
  return Status::Ok();
}

}  // namespace tessera::net
