// A control plane's URL as a client takes it (net/client_tls.h ServerUrl): what it keeps, and
// what it refuses before any request is sent.
#include <gtest/gtest.h>

#include <string>

#include "net/client_tls.h"

namespace tessera::net {
namespace {

TEST(ServerUrl, HostsAndPortsAreTakenAsTheyAreWritten) {
  for (const std::string u : {"http://127.0.0.1:8080", "https://tessera.example.org",
                              "https://[::1]:8443", "https://[fe80::1]", "http://a:65535"}) {
    auto r = ServerUrl(u);
    ASSERT_TRUE(r.ok()) << u << ": " << r.status().ToString();
    EXPECT_EQ(*r, u);
  }
  EXPECT_EQ(*ServerUrl("http://a:1/"), "http://a:1");
}

// An unbracketed IPv6 address or a second port was read as a host with a colon in it, and
// failed later as "cannot reach".
TEST(ServerUrl, AnythingElseIsRefusedNamingTheUrl) {
  for (const std::string u :
       {"ftp://x", "127.0.0.1:1", "http://a:1/v1", "http://a:1:2", "http://::1", "https://::1:8443",
        "http://a:0", "http://a:65536", "http://a:", "http://", "https://[::1", "https://[::1]x",
        "http://user@a:1", "http://a b:1", "http://a:1?x"}) {
    auto r = ServerUrl(u);
    ASSERT_FALSE(r.ok()) << u;
    EXPECT_NE(r.status().message().find("server URL '" + u + "'"), std::string::npos)
        << r.status().ToString();
  }
}

}  // namespace
}  // namespace tessera::net
