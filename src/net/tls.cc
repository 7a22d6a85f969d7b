#include "net/tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

namespace tessera::net {
namespace {

template <class T, void (*F)(T*)>
struct Deleter {
  void operator()(T* p) const { F(p); }
};
using PKey = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Ext = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>>;

bool IsIp(const std::string& h) {
  unsigned char buf[16];
  return inet_pton(AF_INET, h.c_str(), buf) == 1 || inet_pton(AF_INET6, h.c_str(), buf) == 1;
}

bool AddExt(X509* cert, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  Ext ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  return ext != nullptr && X509_add_ext(cert, ext.get(), -1) == 1;
}

// Writes `write(FILE*)` to path + ".tmp" with `mode`, then renames it into place.
template <class Fn>
Status WritePem(const std::string& path, mode_t mode, Fn write) {
  const std::string tmp = path + ".tmp";
  std::remove(tmp.c_str());
  // Its mode from its creation (a key made with the umask's and chmod-ed after could be opened
  // by another account in between), never through a link.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  FILE* f = fd < 0 ? nullptr : ::fdopen(fd, "w");
  if (f == nullptr) {
    if (fd >= 0) ::close(fd);
    return Status::FailedPrecondition("cannot write " + tmp);
  }
  const bool ok = write(f);
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    return Status::Internal("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::FailedPrecondition("cannot write " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace

Status HardenServerTls(SSL_CTX* ctx) {
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
      SSL_CTX_set_cipher_list(ctx, kServerTls12Ciphers) != 1) {
    return Status::Internal("this OpenSSL has none of the TLS 1.2 suites " +
                            std::string(kServerTls12Ciphers));
  }
  SSL_CTX_set_options(
      ctx, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  // No server-side session cache: resumption uses stateless tickets. A cache holds every
  // client's session for 5 minutes, among the connections' buffers in the heap.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  return Status::Ok();
}

Status WriteSelfSigned(const std::string& cert_path, const std::string& key_path,
                       const std::vector<std::string>& hosts, int days) {
  if (hosts.empty()) return Status::InvalidArgument("a certificate needs at least one host name");
  PKey key(EVP_EC_gen("P-256"));
  if (!key) return Status::Internal("cannot generate an EC P-256 key");
  Cert cert(X509_new());
  unsigned char serial[16];
  if (!cert || RAND_bytes(serial, sizeof serial) != 1)
    return Status::Internal("cannot make a certificate");
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  bool ok = bn != nullptr && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get())) != nullptr;
  BN_free(bn);
  ok = ok && X509_set_version(cert.get(), 2) == 1;
  ok = ok && X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) != nullptr;
  ok = ok && X509_gmtime_adj(X509_getm_notAfter(cert.get()), int64_t{days} * 24 * 3600) != nullptr;
  ok = ok && X509_set_pubkey(cert.get(), key.get()) == 1;
  X509_NAME* name = X509_get_subject_name(cert.get());
  ok = ok && X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                                        reinterpret_cast<const unsigned char*>("Tessera"), -1, -1,
                                        0) == 1;
  ok = ok && X509_NAME_add_entry_by_txt(
                 name, "CN", MBSTRING_ASC,
                 reinterpret_cast<const unsigned char*>(hosts.front().c_str()), -1, -1, 0) == 1;
  ok = ok && X509_set_issuer_name(cert.get(), name) == 1;
  std::string san;
  for (const std::string& h : hosts)
    san += (san.empty() ? "" : ",") + std::string(IsIp(h) ? "IP:" : "DNS:") + h;
  ok = ok && AddExt(cert.get(), NID_subject_alt_name, san);
  ok = ok && AddExt(cert.get(), NID_basic_constraints, "critical,CA:TRUE");
  ok = ok && AddExt(cert.get(), NID_key_usage, "critical,digitalSignature,keyCertSign");
  ok = ok && AddExt(cert.get(), NID_ext_key_usage, "serverAuth,clientAuth");
  ok = ok && AddExt(cert.get(), NID_subject_key_identifier, "hash");
  ok = ok && X509_sign(cert.get(), key.get(), EVP_sha256()) > 0;
  if (!ok) return Status::Internal("cannot build a self-signed certificate for " + san);
  Status st = WritePem(key_path, 0600, [&](FILE* f) {
    return PEM_write_PrivateKey(f, key.get(), nullptr, nullptr, 0, nullptr, nullptr) == 1;
  });
  if (!st.ok()) return st;
  return WritePem(cert_path, 0644, [&](FILE* f) { return PEM_write_X509(f, cert.get()) == 1; });
}

}  // namespace tessera::net
