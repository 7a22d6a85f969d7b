// TLS helpers: a self-signed certificate for local use (`tessera up`).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::net {

// Writes a new self-signed certificate (PEM, valid for `days`) and its private key (PEM, mode
// 0600) for `hosts`: names become DNS subject alternative names, IPv4/IPv6 literals IP ones. The
// certificate is its own CA, so a client that trusts the file (TESSERA_CA) verifies the server.
// An EC P-256 key. Nothing is written when any step fails.
Status WriteSelfSigned(const std::string& cert_path, const std::string& key_path, const std::vector<std::string>& hosts,
                       int days = 825);

}  // namespace tessera::net
