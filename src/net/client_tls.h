// What the HTTP clients (the `tessera` commands, the agent) share: HTTPS settings, URL checks and
// secrets read from files (--token-file). The client itself: net/http_client.h.
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>

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
  return Status::Ok();
}

}  // namespace tessera::net
