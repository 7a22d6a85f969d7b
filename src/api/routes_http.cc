// What the API's routes and servers share (routes_http.h): JSON answers, the bearer token, the
// request body and the boundary check of a request's text.
#include "api/routes_http.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <string_view>
#include <vector>

#include "auth/jwt.h"
#include "auth/oidc.h"
#include "common/text.h"

namespace tessera::api {
namespace {

int HttpCode(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kInternal:
      return 500;
  }
  return 500;
}

// How deep arrays and objects nest in JSON text (strings skipped), stopping past `limit`: a
// small body nested half a million deep would otherwise be parsed, and then copied and freed
// recursively, until the stack runs out.
int Nesting(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// Where and why the parser stopped, from its message ("[json.exception.parse_error.101] parse
// error at line 1, column 3: syntax error while parsing object key - invalid literal; last read:
// '{no'; expected string literal"): "at line 1, column 3: syntax error while parsing object key
// - invalid literal (expected string literal)". What it last read is the sender's own bytes,
// left out (they may be any length, and not text).
std::string ParseErrorWords(std::string_view what) {
  constexpr std::string_view kAt = "parse error ",
                             kRead = "; last read: ", kExpected = "; expected ";
  const size_t at = what.find(kAt);
  std::string_view rest = at == std::string_view::npos ? what : what.substr(at + kAt.size());
  const size_t expected = rest.rfind(kExpected);
  std::string words(rest.substr(0, std::min(rest.find(kRead), expected)));
  if (expected != std::string_view::npos) {
    words += " (expected " + std::string(rest.substr(expected + kExpected.size())) + ")";
  }
  return ToValidUtf8(EscapeForTerminal(words));
}

}  // namespace

void Reply(HttpResponse& res, int code, const Json& body) {
  res.status = code;
  res.content_type = "application/json";
  // Invalid UTF-8 from an old record is replaced (U+FFFD), never a reason to fail the answer.
  res.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void ReplyError(HttpResponse& res, const Status& st) {
  Reply(res, HttpCode(st), Json{{"error", st.message()}});
  if (res.status == 429) res.headers.emplace_back("Retry-After", "5");  // a limit: try again later
}

void ReplyLater(const net::HttpReply& reply, const Result<Json>& r, int ok_status) {
  HttpResponse res;
  if (r.ok()) {
    Reply(res, ok_status, *r);
  } else {
    ReplyError(res, r.status());
  }
  reply(std::move(res));
}

// A provider's token (oidc: configured and the token a JWT) as an identity: verified
// (auth::OidcVerifier), then its claims mapped: the groups claim's values that name Tessera
// groups, the role by oidc.roles, the account claim as run_as.
static Result<Identity> FromProvider(const Engine& e, const std::string& token) {
  const EngineConfig& c = e.config();
  auto claims = c.oidc_verifier->Verify(token, e.NowMs());
  if (!claims.ok()) return claims.status();
  auto m = auth::MapClaims(*claims, c.oidc);
  if (!m.ok()) return m.status();
  Identity id;
  id.name = m->name;
  id.subject = m->subject;
  id.expires_ms = m->expires_ms;
  auto role = ParseRole(m->role);
  if (!role.ok()) return role.status();
  id.role = *role;
  for (const Identity& fixed : c.identities) {
    if (fixed.name == id.name) {
      return Status::Unauthenticated("the provider's '" + id.name +
                                     "' has the name of an identity of the config: refused");
    }
  }
  for (const std::string& g : m->groups) {
    if (c.FindGroup(g) != nullptr) id.groups.push_back(g);
  }
  if (!m->account.empty()) {
    if (!IsUnixAccountName(m->account) || m->account == "root") {
      return Status::Unauthenticated("the token's '" + c.oidc.account_claim + "' claim '" +
                                     m->account + "' is not a Unix account name for jobs");
    }
    id.run_as = m->account;
  }
  return id;
}

Result<Identity> Authenticate(const Engine& e, const HttpRequest& req) {
  const std::string h = req.header("authorization");
  // The scheme's name is case-insensitive (RFC 9110, 11.1): "bearer" is "Bearer".
  constexpr std::string_view kScheme = "bearer ";
  const bool bearer = h.size() > kScheme.size() &&
                      std::equal(kScheme.begin(), kScheme.end(), h.begin(), [](char a, char b) {
                        return a == std::tolower(static_cast<unsigned char>(b));
                      });
  if (!bearer)
    return Status::Unauthenticated("missing bearer token (Authorization: Bearer <token>)");
  const std::string token = h.substr(kScheme.size());
  if (e.config().oidc_verifier && auth::LooksLikeJwt(token)) return FromProvider(e, token);
  const Identity* id = e.config().FindIdentityByTokenHash(Sha256Hex(token));
  if (!id) return Status::Unauthenticated("unknown token");
  if (id->expires_ms > 0 && e.NowMs() >= id->expires_ms) {
    return Status::Unauthenticated("the token of '" + id->name + "' expired at " +
                                   auth::FormatUtc(id->expires_ms) +
                                   ": ask an admin for a new one");
  }
  return *id;
}

Result<Json> Body(const HttpRequest& req) {
  if (req.body.size() > kMaxBody) return Status::InvalidArgument("body over 1 MiB");
  constexpr int kMaxNesting = 64;
  if (Nesting(req.body, kMaxNesting) > kMaxNesting) {
    return Status::InvalidArgument("JSON body nested deeper than 64 levels");
  }
  // A field given twice in one object is refused: the parser would keep the last, unchecked
  // against the first (a job went to the second queue its body named).
  std::vector<std::set<std::string, std::less<>>> open;  // the keys of each object being read
  std::string twice;
  auto check = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) {
      open.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (event == Json::parse_event_t::key && !open.empty() && twice.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open.back().insert(key).second) twice = key.substr(0, 64);
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(req.body, check);
  } catch (const Json::parse_error& e) {
    return Status::InvalidArgument("malformed JSON body: " + ParseErrorWords(e.what()));
  } catch (const Json::out_of_range& e) {  // "number overflow parsing '1e400'": was a 500
    const std::string_view what = e.what();
    const size_t from = what.find('\''), to = what.rfind('\'');
    const std::string number(from < to ? what.substr(from + 1, std::min<size_t>(to - from - 1, 40))
                                       : std::string_view("?"));
    return Status::InvalidArgument(
        "malformed JSON body: a number past what JSON numbers hold here (" + number + ")");
  }
  if (!twice.empty()) {
    return Status::InvalidArgument("field '" + ToValidUtf8(EscapeForTerminal(twice)) +
                                   "' is given twice in the JSON body");
  }
  return j;
}

Status CheckRequestText(const HttpRequest& req) {
  if (!IsCleanText(req.path)) {
    return Status::InvalidArgument(
        "the request path is not valid UTF-8 text (or holds control characters)");
  }
  for (const auto& [name, value] : req.query) {
    if (!IsCleanText(name) || !IsCleanText(value)) {
      return Status::InvalidArgument("query parameter '" + ToValidUtf8(EscapeForTerminal(name)) +
                                     "' is not valid UTF-8 text (or holds control characters)");
    }
  }
  const std::string key = req.header("idempotency-key");
  bool key_ok = key.size() <= 255;
  for (unsigned char c : key) key_ok = key_ok && c > 0x20 && c < 0x7f;
  if (!key_ok)
    // The words of the submission's own check (ValidIdempotencyKey), which this one precedes:
    // "printable ASCII" refused a key with a space or '!' as if they were not printable.
    return Status::InvalidArgument(
        "Idempotency-Key: expected 1 to 200 letters, digits or -_.:/+= (a UUID, say)");
  return Status::Ok();
}

}  // namespace tessera::api
