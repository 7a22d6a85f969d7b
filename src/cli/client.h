// A small HTTP client for the `tessera` user commands: the server and token come from
// TESSERA_URL and TESSERA_TOKEN (or --url / --token).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace tessera::cli {

struct ClientReply {
  int status = 0;         // HTTP status, 0 when the server could not be reached
  std::string body;
  std::string error;      // a message for people when status is 0 or >= 400
};

ClientReply HttpCall(const std::string& url, const std::string& token, const std::string& method,
                     const std::string& path, const std::string& body = "");

}  // namespace tessera::cli
