// An HTTP(S) client with the settings of net/client_tls.h. Header-only: its users already
// include cpp-httplib.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>

#include "net/client_tls.h"

namespace tessera::net {

// A client for "http://host:port" or "https://host:port". HTTPS verifies the server's
// certificate chain and host name unless `tls.insecure`.
inline std::unique_ptr<httplib::Client> NewHttpClient(const std::string& url,
                                                      const ClientTls& tls) {
  auto c = tls.cert_file.empty()
               ? std::make_unique<httplib::Client>(url)
               : std::make_unique<httplib::Client>(url, tls.cert_file, tls.key_file);
  if (!tls.ca_file.empty()) c->set_ca_cert_path(tls.ca_file.c_str());
  c->enable_server_certificate_verification(!tls.insecure);
  c->set_tcp_nodelay(
      true);  // a request's headers and body are separate writes: no delayed-ACK stall
  return c;
}

}  // namespace tessera::net
