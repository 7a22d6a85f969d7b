// What the API's routes (routes.cc) and its servers (server.cc) share: answers in JSON, the bearer
// token looked up, a request's JSON body and the boundary check of a request's text. Internal to
// tessera_api.
#pragma once

#include <cstddef>
#include <string>

#include "api/engine.h"
#include "common/log.h"
#include "common/status.h"
#include "net/http_server.h"

namespace tessera::api {

using net::HttpRequest;
using net::HttpResponse;

// Bodies over this are refused (413 by the HTTP server, 400 by Body()).
constexpr size_t kMaxBody = 1024 * 1024;

// `body` as JSON with status `code` (invalid UTF-8 replaced, never a reason to fail the answer).
void Reply(HttpResponse& res, int code, const Json& body);
// {"error": message} with the status code that `st` maps to (429 also says Retry-After).
void ReplyError(HttpResponse& res, const Status& st);
template <typename T>
void ReplyResult(HttpResponse& res, const Result<T>& r) {
  if (r.ok()) {
    Reply(res, 200, *r);
  } else {
    ReplyError(res, r.status());
  }
}
// Answers `reply` with `r` (200, or `ok_status`), or its error.
void ReplyLater(const net::HttpReply& reply, const Result<Json>& r, int ok_status = 200);

// The identity whose token the request bears ("Authorization: Bearer <token>", looked up by its
// SHA-256), or Unauthenticated naming what is missing.
Result<Identity> Authenticate(const Engine& e, const HttpRequest& req);

// The request's body as JSON: at most 1 MiB, nested at most 64 deep, well-formed.
Result<Json> Body(const HttpRequest& req);

// The boundary check every route passes before its handler: the decoded path and every query
// parameter must be valid UTF-8 without control characters (they name jobs, nodes and filters,
// and reach events and logs), and an Idempotency-Key is printable ASCII of at most 255 bytes.
// A request failing it is refused (400) before authentication, so that nothing of it is stored.
Status CheckRequestText(const HttpRequest& req);

}  // namespace tessera::api
