// The server's TLS suites, with a real OpenSSL client (libssl, in-process) offering one TLS 1.2
// suite at a time: only ECDHE with AES-GCM or ChaCha20-Poly1305 (AEAD, forward secrecy) is
// agreed, for an RSA and for an EC (P-256, what `tessera up` makes) certificate; CBC suites and
// RSA key exchange are refused; TLS 1.3 works; TLS 1.1 is refused.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "net/http_server.h"
#include "net/tls.h"

namespace tessera::net {
namespace {

// A self-signed RSA-2048 certificate and key in `dir` (net::WriteSelfSigned makes EC keys only).
bool WriteRsaSelfSigned(const std::string& cert_path, const std::string& key_path) {
  EVP_PKEY* key = EVP_RSA_gen(2048);
  X509* cert = X509_new();
  bool ok = key != nullptr && cert != nullptr;
  ok = ok && X509_set_version(cert, 2) == 1;
  ok = ok && ASN1_INTEGER_set(X509_get_serialNumber(cert), 1) == 1;
  ok = ok && X509_gmtime_adj(X509_getm_notBefore(cert), -3600) != nullptr;
  ok = ok && X509_gmtime_adj(X509_getm_notAfter(cert), 24 * 3600) != nullptr;
  ok = ok && X509_set_pubkey(cert, key) == 1;
  X509_NAME* name = ok ? X509_get_subject_name(cert) : nullptr;
  ok = ok && X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                        reinterpret_cast<const unsigned char*>("localhost"), -1, -1,
                                        0) == 1;
  ok = ok && X509_set_issuer_name(cert, name) == 1;
  ok = ok && X509_sign(cert, key, EVP_sha256()) > 0;
  FILE* k = ok ? std::fopen(key_path.c_str(), "w") : nullptr;
  ok = ok && k != nullptr &&
       PEM_write_PrivateKey(k, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  if (k != nullptr) std::fclose(k);
  FILE* c = ok ? std::fopen(cert_path.c_str(), "w") : nullptr;
  ok = ok && c != nullptr && PEM_write_X509(c, cert) == 1;
  if (c != nullptr) std::fclose(c);
  X509_free(cert);
  EVP_PKEY_free(key);
  return ok;
}

struct Agreed {
  bool ok = false;
  std::string version;  // "TLSv1.2"
  std::string cipher;   // OpenSSL's name
  int status = 0;       // of GET /v1/health over it
};

// A TLS handshake offering only `version` and, for TLS 1.2, only the suites in `ciphers`; then a
// GET /v1/health over it.
Agreed Handshake(int port, int version, const std::string& ciphers) {
  Agreed out;
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_security_level(ctx, 0);  // offer even what the system's policy would not
  SSL_CTX_set_min_proto_version(ctx, version);
  SSL_CTX_set_max_proto_version(ctx, version);
  if (!ciphers.empty() && SSL_CTX_set_cipher_list(ctx, ciphers.c_str()) != 1) {
    ADD_FAILURE() << "this OpenSSL has no suite " << ciphers;
    SSL_CTX_free(ctx);
    return out;
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  SSL* ssl = SSL_new(ctx);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0) {
    SSL_set_fd(ssl, fd);
    if (SSL_connect(ssl) == 1) {
      out.ok = true;
      out.version = SSL_get_version(ssl);
      out.cipher = SSL_get_cipher_name(ssl);
      const std::string get = "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
      SSL_write(ssl, get.data(), static_cast<int>(get.size()));
      char buf[256];
      const int n = SSL_read(ssl, buf, sizeof buf - 1);
      if (n > 12)
        out.status = std::atoi(std::string(buf, static_cast<size_t>(n)).substr(9, 3).c_str());
    }
  }
  ERR_clear_error();
  SSL_free(ssl);
  ::close(fd);
  SSL_CTX_free(ctx);
  return out;
}

class TlsCiphersTest : public ::testing::Test {
 protected:
  void Start(const std::string& cert, const std::string& key) {
    HttpServerOptions o;
    o.tls_cert_file = cert;
    o.tls_key_file = key;
    server_ = std::make_unique<HttpServer>(o);
    server_->Route("GET", "/v1/health",
                   [](const HttpRequest&, HttpResponse& res) { res.body = "{}"; });
    auto port = server_->Bind("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    port_ = *port;
    thread_ = std::thread([this] { server_->Run(); });
  }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tessera_tls_ciphers_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
    std::filesystem::remove_all(dir_);
  }
  void ExpectRefused(const std::string& suite) {
    const Agreed a = Handshake(port_, TLS1_2_VERSION, suite);
    EXPECT_FALSE(a.ok) << "TLS 1.2 " << suite << " was agreed";
  }
  void ExpectAgreed(const std::string& suite) {
    const Agreed a = Handshake(port_, TLS1_2_VERSION, suite);
    EXPECT_TRUE(a.ok) << "TLS 1.2 " << suite << " was refused";
    EXPECT_EQ(a.cipher, suite);
    EXPECT_EQ(a.version, "TLSv1.2");
    EXPECT_EQ(a.status, 200);
  }

  std::filesystem::path dir_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(TlsCiphersTest, AnRsaCertificateAgreesOnlyEcdheWithAead) {
  const std::string cert = dir_ / "rsa-cert.pem", key = dir_ / "rsa-key.pem";
  ASSERT_TRUE(WriteRsaSelfSigned(cert, key));
  Start(cert, key);
  for (const char* s :
       {"AES128-SHA256", "AES256-SHA256", "AES128-SHA", "AES128-GCM-SHA256", "AES256-GCM-SHA384",
        "ECDHE-RSA-AES128-SHA256", "ECDHE-RSA-AES256-SHA384", "ECDHE-RSA-AES128-SHA",
        "DHE-RSA-AES128-GCM-SHA256", "DHE-RSA-AES128-SHA256"}) {
    ExpectRefused(s);
  }
  for (const char* s : {"ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384",
                        "ECDHE-RSA-CHACHA20-POLY1305"}) {
    ExpectAgreed(s);
  }
  EXPECT_FALSE(Handshake(port_, TLS1_1_VERSION, "ALL").ok);
  const Agreed tls13 = Handshake(port_, TLS1_3_VERSION, "");
  EXPECT_TRUE(tls13.ok);
  EXPECT_EQ(tls13.version, "TLSv1.3");
  EXPECT_EQ(tls13.status, 200);
}

TEST_F(TlsCiphersTest, AnEcCertificateAgreesOnlyEcdheWithAead) {
  const std::string cert = dir_ / "ec-cert.pem", key = dir_ / "ec-key.pem";
  ASSERT_TRUE(WriteSelfSigned(cert, key, {"localhost", "127.0.0.1"}).ok());
  Start(cert, key);
  for (const char* s : {"ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384",
                        "ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA"}) {
    ExpectRefused(s);
  }
  for (const char* s : {"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
                        "ECDHE-ECDSA-CHACHA20-POLY1305"}) {
    ExpectAgreed(s);
  }
}

}  // namespace
}  // namespace tessera::net
