// JSON Web Tokens and JSON Web Key sets, as much of them as OpenID Connect needs to check a
// provider's signed token (RFC 7515, 7517, 7518, 7519): the compact form parsed, the provider's
// public RSA and P-256 keys read from its JWK set, and RS256 / ES256 signatures checked with
// OpenSSL. Nothing here knows the engine, HTTP or the clock; OidcVerifier (oidc.h) does the rest.
//
// Thread-safety: a KeySet is immutable once parsed and may be shared between threads.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tessera::auth {

using Json = nlohmann::json;

// base64url without padding (RFC 4648 section 5), as JOSE writes it; padding is tolerated.
Result<std::string> Base64UrlDecode(std::string_view text);
std::string Base64UrlEncode(std::string_view bytes);

// Whether `token` has the compact JWS shape (three base64url parts separated by dots), i.e. is
// worth checking as a provider's token rather than looking up as a static one.
bool LooksLikeJwt(std::string_view token);

struct Jwt {
  Json header;                // {"alg": "RS256", "kid": "...", "typ": "JWT"}
  Json claims;                // the payload: iss, sub, aud, exp, ...
  std::string signing_input;  // "HEADER.PAYLOAD" as sent: what the signature covers
  std::string signature;      // raw bytes
};

// The parts of a compact JWS, or InvalidArgument saying which part is malformed.
Result<Jwt> ParseJwt(std::string_view token);

// A provider's public keys (its jwks_uri document), by key id. Keys of other types or uses
// ("use": "enc") are skipped; a set with no usable key is an error.
class KeySet {
 public:
  static Result<KeySet> Parse(const Json& jwks);
  bool Has(const std::string& kid) const { return keys_.count(kid) > 0; }
  size_t size() const { return keys_.size(); }
  // Ok when `jwt` is signed (RS256 or ES256, as its header says and its key allows) by the key
  // its header's kid names; Unauthenticated saying why not (NotFound for an unknown kid, so
  // that the caller may fetch the keys again: the provider may have rotated them).
  Status Verify(const Jwt& jwt) const;

 private:
  struct Key;
  std::map<std::string, std::shared_ptr<const Key>> keys_;
};

}  // namespace tessera::auth
