// JWTs and JWK sets (jwt.h), on OpenSSL 3's EVP interface.
#include "auth/jwt.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>

#include <array>

namespace tessera::auth {

struct KeySet::Key {
  std::string kty;  // "RSA" or "EC"
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> pkey{nullptr, &EVP_PKEY_free};
};

namespace {

int Base64UrlValue(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

// A public key from OpenSSL parameters built by `fill`, or null.
template <typename Fill>
PkeyPtr FromParams(const char* type, Fill fill) {
  PkeyPtr out(nullptr, &EVP_PKEY_free);
  OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
  if (bld == nullptr) return out;
  std::vector<BIGNUM*> nums;
  OSSL_PARAM* params = nullptr;
  EVP_PKEY_CTX* ctx = nullptr;
  if (fill(bld, nums) && (params = OSSL_PARAM_BLD_to_param(bld)) != nullptr &&
      (ctx = EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr)) != nullptr &&
      EVP_PKEY_fromdata_init(ctx) == 1) {
    EVP_PKEY* key = nullptr;
    if (EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, params) == 1) out.reset(key);
  }
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(bld);
  for (BIGNUM* b : nums) BN_free(b);
  return out;
}

Result<std::string> Member(const Json& jwk, const char* name, const std::string& where) {
  if (!jwk.contains(name) || !jwk[name].is_string())
    return Status::InvalidArgument(where + ": no '" + name + "'");
  auto bytes = Base64UrlDecode(jwk[name].get<std::string>());
  if (!bytes.ok() || bytes->empty())
    return Status::InvalidArgument(where + ": '" + name + "' is not base64url");
  return bytes;
}

Result<PkeyPtr> RsaKey(const Json& jwk, const std::string& where) {
  auto n = Member(jwk, "n", where);
  if (!n.ok()) return n.status();
  auto e = Member(jwk, "e", where);
  if (!e.ok()) return e.status();
  if (n->size() < 256) return Status::InvalidArgument(where + ": RSA keys under 2048 bits refused");
  PkeyPtr k = FromParams("RSA", [&](OSSL_PARAM_BLD* bld, std::vector<BIGNUM*>& nums) {
    BIGNUM* bn = BN_bin2bn(reinterpret_cast<const unsigned char*>(n->data()),
                           static_cast<int>(n->size()), nullptr);
    BIGNUM* be = BN_bin2bn(reinterpret_cast<const unsigned char*>(e->data()),
                           static_cast<int>(e->size()), nullptr);
    nums = {bn, be};
    return bn && be && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn) == 1 &&
           OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, be) == 1;
  });
  if (!k) return Status::InvalidArgument(where + ": not a usable RSA key");
  return k;
}

Result<PkeyPtr> EcKey(const Json& jwk, const std::string& where) {
  if (jwk.value("crv", "") != "P-256")
    return Status::InvalidArgument(where + ": only the P-256 curve is supported");
  auto x = Member(jwk, "x", where);
  if (!x.ok()) return x.status();
  auto y = Member(jwk, "y", where);
  if (!y.ok()) return y.status();
  if (x->size() != 32 || y->size() != 32)
    return Status::InvalidArgument(where + ": P-256 coordinates must be 32 bytes");
  std::string point = "\x04" + *x + *y;  // uncompressed
  char group[] = "prime256v1";
  PkeyPtr k = FromParams("EC", [&](OSSL_PARAM_BLD* bld, std::vector<BIGNUM*>&) {
    return OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, group, 0) == 1 &&
           OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point.data(),
                                            point.size()) == 1;
  });
  if (!k) return Status::InvalidArgument(where + ": not a usable P-256 key");
  return k;
}

// JOSE's ES256 signature is r || s (32 bytes each); OpenSSL verifies DER.
std::string EcdsaDer(const std::string& raw) {
  if (raw.size() != 64) return "";
  ECDSA_SIG* sig = ECDSA_SIG_new();
  BIGNUM* r = BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data()), 32, nullptr);
  BIGNUM* s = BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data()) + 32, 32, nullptr);
  std::string out;
  if (sig && r && s && ECDSA_SIG_set0(sig, r, s) == 1) {
    r = s = nullptr;  // owned by sig now
    unsigned char* der = nullptr;
    const int len = i2d_ECDSA_SIG(sig, &der);
    if (len > 0) out.assign(reinterpret_cast<char*>(der), static_cast<size_t>(len));
    OPENSSL_free(der);
  }
  BN_free(r);
  BN_free(s);
  ECDSA_SIG_free(sig);
  return out;
}

}  // namespace

Result<std::string> Base64UrlDecode(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return Status::InvalidArgument("not base64url");
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = Base64UrlValue(c);
    if (v < 0) return Status::InvalidArgument("not base64url");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

std::string Base64UrlEncode(std::string_view bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : bytes) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += kAlphabet[(acc >> bits) & 63];
    }
  }
  if (bits > 0) out += kAlphabet[(acc << (6 - bits)) & 63];
  return out;
}

bool LooksLikeJwt(std::string_view token) {
  size_t dots = 0;
  for (char c : token) {
    if (c == '.') {
      ++dots;
    } else if (Base64UrlValue(c) < 0) {
      return false;
    }
  }
  return dots == 2 && token.front() != '.' && token.back() != '.';
}

Result<Jwt> ParseJwt(std::string_view token) {
  if (!LooksLikeJwt(token))
    return Status::InvalidArgument("not a JWT (expected HEADER.PAYLOAD.SIGNATURE in base64url)");
  const size_t a = token.find('.');
  const size_t b = token.find('.', a + 1);
  Jwt jwt;
  jwt.signing_input = std::string(token.substr(0, b));
  auto header = Base64UrlDecode(token.substr(0, a));
  auto payload = Base64UrlDecode(token.substr(a + 1, b - a - 1));
  auto sig = Base64UrlDecode(token.substr(b + 1));
  if (!header.ok() || !payload.ok() || !sig.ok())
    return Status::InvalidArgument("JWT: a part is not base64url");
  jwt.header = Json::parse(*header, nullptr, false);
  if (!jwt.header.is_object())
    return Status::InvalidArgument("JWT: the header is not a JSON object");
  jwt.claims = Json::parse(*payload, nullptr, false);
  if (!jwt.claims.is_object())
    return Status::InvalidArgument("JWT: the payload is not a JSON object");
  jwt.signature = std::move(*sig);
  return jwt;
}

Result<KeySet> KeySet::Parse(const Json& jwks) {
  if (!jwks.is_object() || !jwks.contains("keys") || !jwks["keys"].is_array())
    return Status::InvalidArgument("JWK set: expected {\"keys\": [...]}");
  KeySet set;
  for (size_t i = 0; i < jwks["keys"].size(); ++i) {
    const Json& jwk = jwks["keys"][i];
    const std::string where = "JWK set: keys[" + std::to_string(i) + "]";
    if (!jwk.is_object()) return Status::InvalidArgument(where + ": not an object");
    if (jwk.value("use", "sig") != "sig") continue;  // an encryption key
    auto key = std::make_shared<Key>();
    key->kty = jwk.value("kty", "");
    Result<PkeyPtr> pkey = Status::InvalidArgument("");
    if (key->kty == "RSA") {
      pkey = RsaKey(jwk, where);
    } else if (key->kty == "EC") {
      pkey = EcKey(jwk, where);
    } else {
      continue;  // a key type no supported algorithm uses (e.g. OKP)
    }
    if (!pkey.ok()) return pkey.status();
    key->pkey = std::move(*pkey);
    set.keys_[jwk.value("kid", "")] = std::move(key);
  }
  if (set.keys_.empty()) return Status::InvalidArgument("JWK set: no RSA or P-256 signing key");
  return set;
}

Status KeySet::Verify(const Jwt& jwt) const {
  const std::string alg = jwt.header.value("alg", "");
  const std::string kid = jwt.header.value("kid", "");
  if (alg != "RS256" && alg != "ES256")
    return Status::Unauthenticated("token signed with '" + alg + "' (RS256 or ES256 accepted)");
  auto it = keys_.find(kid);
  if (it == keys_.end() && kid.empty() && keys_.size() == 1) it = keys_.begin();
  if (it == keys_.end()) return Status::NotFound("token signed with unknown key '" + kid + "'");
  const Key& key = *it->second;
  if ((alg == "RS256") != (key.kty == "RSA"))
    return Status::Unauthenticated("token's alg '" + alg + "' does not fit its key '" + kid + "'");
  const std::string sig = alg == "ES256" ? EcdsaDer(jwt.signature) : jwt.signature;
  if (sig.empty()) return Status::Unauthenticated("token's signature is malformed");
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx != nullptr &&
            EVP_DigestVerifyInit(ctx, nullptr, EVP_sha256(), nullptr, key.pkey.get()) == 1 &&
            EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                             reinterpret_cast<const unsigned char*>(jwt.signing_input.data()),
                             jwt.signing_input.size()) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) return Status::Unauthenticated("token's signature does not verify");
  return Status::Ok();
}

}  // namespace tessera::auth
