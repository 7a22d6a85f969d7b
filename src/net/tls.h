// TLS helpers: the server's protocol and suite policy; a self-signed certificate for local use
// (`tessera up`).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace tessera::net {

// TLS 1.2 suites the server agrees: ECDHE key exchange (forward secrecy) with an AEAD cipher,
// for ECDSA and RSA certificates. TLS 1.3's suites are all AEAD with (EC)DHE and stay OpenSSL's.
inline constexpr const char* kServerTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

// The server's policy on `ctx`: TLS 1.2 or newer, TLS 1.2 only with kServerTls12Ciphers (the
// server's order), no renegotiation (a client could make the server redo the costly part of a
// handshake at will) and no compression; OpenSSL's read and write buffers are released while a
// connection idles (about 34 KB each); no server-side session cache (stateless tickets resume).
Status HardenServerTls(ssl_ctx_st* ctx);

// Writes a new self-signed certificate (PEM, valid for `days`) and its private key (PEM, mode
// 0600) for `hosts`: names become DNS subject alternative names, IPv4/IPv6 literals IP ones. The
// certificate is its own CA, so a client that trusts the file (TESSERA_CA) verifies the server.
// An EC P-256 key. Nothing is written when any step fails.
Status WriteSelfSigned(const std::string& cert_path, const std::string& key_path,
                       const std::vector<std::string>& hosts, int days = 825);

}  // namespace tessera::net
