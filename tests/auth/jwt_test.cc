// JWTs and JWK sets (auth/jwt.h): base64url, the compact form, and RS256 / ES256 signatures made
// here with OpenSSL (fresh keys, published as a JWK set the way a provider does) checked by
// KeySet: a good signature verifies; a changed payload, another key, an unknown key id, an
// algorithm that does not fit the key and "none" do not.
#include "auth/jwt.h"

#include <gtest/gtest.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "auth/oidc.h"

namespace tessera::auth {
namespace {

using Pkey = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

std::string BnBytes(EVP_PKEY* k, const char* name, int pad = 0) {
  BIGNUM* bn = nullptr;
  EVP_PKEY_get_bn_param(k, name, &bn);
  std::string out(static_cast<size_t>(std::max(pad, BN_num_bytes(bn))), '\0');
  BN_bn2binpad(bn, reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size()));
  BN_free(bn);
  return out;
}

// A key pair and its public JWK.
struct TestKey {
  Pkey key{nullptr, &EVP_PKEY_free};
  Json jwk;
  std::string alg;
};

TestKey Rsa(const std::string& kid) {
  TestKey t;
  t.key.reset(EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", size_t{2048}));
  t.alg = "RS256";
  t.jwk = {{"kty", "RSA"},
           {"kid", kid},
           {"use", "sig"},
           {"n", Base64UrlEncode(BnBytes(t.key.get(), OSSL_PKEY_PARAM_RSA_N))},
           {"e", Base64UrlEncode(BnBytes(t.key.get(), OSSL_PKEY_PARAM_RSA_E))}};
  return t;
}

TestKey Ec(const std::string& kid) {
  TestKey t;
  t.key.reset(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  t.alg = "ES256";
  t.jwk = {{"kty", "EC"},
           {"kid", kid},
           {"crv", "P-256"},
           {"x", Base64UrlEncode(BnBytes(t.key.get(), OSSL_PKEY_PARAM_EC_PUB_X, 32))},
           {"y", Base64UrlEncode(BnBytes(t.key.get(), OSSL_PKEY_PARAM_EC_PUB_Y, 32))}};
  return t;
}

// A compact JWS of `claims` signed by `k` (header alg and kid as given).
std::string Sign(const TestKey& k, const Json& claims, const std::string& alg = "",
                 const std::string& kid = "") {
  const Json header = {{"alg", alg.empty() ? k.alg : alg},
                       {"kid", kid.empty() ? k.jwk["kid"].get<std::string>() : kid}};
  const std::string input = Base64UrlEncode(header.dump()) + "." + Base64UrlEncode(claims.dump());
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  size_t len = 0;
  EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, k.key.get());
  EVP_DigestSign(ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(input.data()),
                 input.size());
  std::string sig(len, '\0');
  EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                 reinterpret_cast<const unsigned char*>(input.data()), input.size());
  sig.resize(len);
  EVP_MD_CTX_free(ctx);
  if (k.alg == "ES256") {  // DER to JOSE's r || s
    const unsigned char* p = reinterpret_cast<const unsigned char*>(sig.data());
    ECDSA_SIG* es = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(sig.size()));
    std::string raw(64, '\0');
    BN_bn2binpad(ECDSA_SIG_get0_r(es), reinterpret_cast<unsigned char*>(raw.data()), 32);
    BN_bn2binpad(ECDSA_SIG_get0_s(es), reinterpret_cast<unsigned char*>(raw.data()) + 32, 32);
    ECDSA_SIG_free(es);
    sig = raw;
  }
  return input + "." + Base64UrlEncode(sig);
}

TEST(JwtTest, Base64UrlRoundTripsAndRefusesOtherAlphabets) {
  for (const std::string s : {"", "f", "fo", "foo", "foob", "\xff\xfe\x00\x01"}) {
    auto back = Base64UrlDecode(Base64UrlEncode(s));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(Base64UrlEncode("\xfb\xff"), "-_8");
  EXPECT_FALSE(Base64UrlDecode("a+b/").ok());
  EXPECT_TRUE(LooksLikeJwt("a.b.c"));
  EXPECT_FALSE(LooksLikeJwt("tsk_0123456789abcdef"));
  EXPECT_FALSE(LooksLikeJwt("a.b"));
  EXPECT_FALSE(LooksLikeJwt(".b.c"));
  EXPECT_NE(ParseJwt("e30.bm90IGpzb24.c2ln").status().message().find("payload is not a JSON"),
            std::string::npos);
}

TEST(JwtTest, SignaturesVerifyOnlyUnchangedAndByTheirKey) {
  const TestKey rsa = Rsa("r1"), ec = Ec("e1"), stranger = Rsa("r1");
  auto set = KeySet::Parse(Json{{"keys", {rsa.jwk, ec.jwk}}});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->size(), 2u);
  const Json claims = {{"iss", "https://idp"}, {"sub", "alice"}};
  for (const TestKey* k : {&rsa, &ec}) {
    auto jwt = ParseJwt(Sign(*k, claims));
    ASSERT_TRUE(jwt.ok());
    EXPECT_TRUE(set->Verify(*jwt).ok()) << k->alg << ": " << set->Verify(*jwt).ToString();
    Jwt changed = *jwt;
    changed.signing_input = changed.signing_input.substr(0, changed.signing_input.find('.') + 1) +
                            Base64UrlEncode(Json{{"iss", "https://idp"}, {"sub", "root"}}.dump());
    EXPECT_EQ(set->Verify(changed).message(), "token's signature does not verify") << k->alg;
  }
  // The same kid, another key: what a forger would try.
  auto forged = ParseJwt(Sign(stranger, claims));
  EXPECT_EQ(set->Verify(*forged).message(), "token's signature does not verify");
  auto unknown = ParseJwt(Sign(rsa, claims, "", "r2"));
  EXPECT_EQ(set->Verify(*unknown).code(), StatusCode::kNotFound);
  auto wrong_alg = ParseJwt(Sign(rsa, claims, "ES256"));
  EXPECT_NE(set->Verify(*wrong_alg).message().find("does not fit its key"), std::string::npos);
  auto none = ParseJwt(Sign(rsa, claims, "none"));
  EXPECT_NE(set->Verify(*none).message().find("RS256 or ES256 accepted"), std::string::npos);
  auto hs = ParseJwt(Sign(rsa, claims, "HS256"));
  EXPECT_NE(set->Verify(*hs).message().find("RS256 or ES256 accepted"), std::string::npos);
}

TEST(JwtTest, KeySetsWithoutUsableKeysAreErrors) {
  EXPECT_FALSE(KeySet::Parse(Json::object()).ok());
  EXPECT_FALSE(KeySet::Parse(Json{{"keys", Json::array()}}).ok());
  Json enc = Rsa("x").jwk;
  enc["use"] = "enc";
  EXPECT_FALSE(KeySet::Parse(Json{{"keys", {enc}}}).ok());
  Json bad = Rsa("x").jwk;
  bad["n"] = "AQAB";  // 3 bytes: far under 2048 bits
  EXPECT_NE(KeySet::Parse(Json{{"keys", {bad}}}).status().message().find("under 2048 bits"),
            std::string::npos);
}

// The red team: tokens naming unknown key ids, sent while the provider answered slowly (4 s),
// made every request wait: each sent the verifier to fetch the keys again, under the lock every
// verification takes, on the server's event loop. A token of a known key is verified with the
// keys at hand while a fetch is on its way; a token of an unknown key waits a moment for the
// fetch it started, and another meanwhile is refused at once. (A provider that never answers
// here: the fetch is held on a latch, released at the end; the bound below is a hang detector.)
TEST(OidcVerifierTest, ASlowProviderNeverHoldsUpTokensOfKnownKeys) {
  const TestKey rsa = Rsa("r1");
  const Json jwks = {{"keys", {rsa.jwk}}};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> slow{false};
  std::atomic<int> fetches{0};
  OidcSettings settings;
  settings.issuer = "https://idp.test";
  settings.client_id = "tessera";
  OidcVerifier v(settings, [&](const std::string& url) -> Result<std::string> {
    if (url.find("openid-configuration") != std::string::npos)
      return Json{{"issuer", "https://idp.test"}, {"jwks_uri", "https://idp.test/keys"}}.dump();
    ++fetches;
    if (slow) released.wait();
    return jwks.dump();
  });
  const int64_t now_ms = 1'800'000'000'000;
  const Json claims = {{"iss", "https://idp.test"},
                       {"aud", "tessera"},
                       {"sub", "s-1"},
                       {"exp", now_ms / 1000 + 600}};
  const std::string good = Sign(rsa, claims);
  ASSERT_TRUE(v.Verify(good, now_ms).ok());
  slow = true;
  const int64_t later = now_ms + 5000;  // past kMinRefetchMs: an unknown key fetches again
  auto unknown = std::async(std::launch::async,
                            [&] { return v.Verify(Sign(rsa, claims, "", "rotated?"), later); });
  while (fetches.load() < 2) std::this_thread::yield();  // its fetch is on its way, and stays
  auto known = std::async(std::launch::async, [&] { return v.Verify(good, later); });
  auto other = std::async(std::launch::async,
                          [&] { return v.Verify(Sign(rsa, claims, "", "another"), later); });
  const bool answered = known.wait_for(std::chrono::seconds(30)) == std::future_status::ready &&
                        other.wait_for(std::chrono::seconds(30)) == std::future_status::ready &&
                        unknown.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  release.set_value();
  ASSERT_TRUE(answered) << "a verification waited for the provider's slow answer";
  EXPECT_TRUE(known.get().ok());
  const Result<Json> refused = other.get();
  EXPECT_EQ(refused.status().code(), StatusCode::kUnauthenticated) << refused.status().ToString();
  EXPECT_EQ(unknown.get().status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(fetches.load(), 2) << "one fetch for the two unknown keys";
}

}  // namespace
}  // namespace tessera::auth
