// How the HTTP server reads one request from bytes: Beast's parser with the server's limits,
// then strict framing checks Beast does not make, then the HttpRequest handlers see. The server's
// connections (http_server.cc) and ParseHttpRequest (no sockets: the fuzz target and tests) use
// the same functions.
//
// Framing (RFC 9112 section 6): a request whose body length two parties could read differently
// is refused (400, connection closed), since a proxy in front may read it the other way
// (request smuggling). Beast 1.74 reads "Transfer-Encoding: chunked, identity" (or "gzip", or
// any list not ending in chunked) as a request without a body, and accepts a Content-Length
// after such a Transfer-Encoding. Refused here:
//   - a Transfer-Encoding other than exactly "chunked" (one field, one coding);
//   - Transfer-Encoding and Content-Length together;
//   - Content-Length values that differ, or that are not decimal digits;
//   - Transfer-Encoding in an HTTP/1.0 request.
#pragma once

// Boost 1.74's Asio uses std::exchange without including <utility>.
#include <utility>

// clang-format off
#include <boost/beast/http.hpp>
// clang-format on
#include <cstddef>
#include <map>
#include <string>
#include <string_view>

#include "net/http_server.h"

namespace tessera::net {

struct HttpParseLimits {
  size_t max_header_bytes = 64 * 1024;  // request line and fields (400 past it)
  size_t max_body_bytes = 1024 * 1024;  // 413 past it
};

using BeastRequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Sets `p`'s header and body limits.
void ConfigureParser(BeastRequestParser& p, const HttpParseLimits& limits);

// Why a request header's framing is refused, or "" when it is sound (see the top of the file).
std::string FramingError(const boost::beast::http::request_header<>& header);

// A request header's fields, names in lower case: read once the header is done, before the
// body (whose chunked trailer fields Beast adds to the same list; they are never headers).
std::map<std::string, std::string> HeaderFields(const boost::beast::http::request_header<>& header);

// What handlers see of a parsed request: the method, the decoded path and query, the header's
// fields (HeaderFields, read before the body), the body (moved from `msg`).
HttpRequest ToHttpRequest(boost::beast::http::request<boost::beast::http::string_body>&& msg,
                          std::map<std::string, std::string> header);

// Decodes "a=1&b=x%20y" into `out` ('+' is a space); malformed escapes stay as they are.
void ParseQuery(const std::string& query, std::map<std::string, std::string>* out);

enum class ParseOutcome {
  kComplete,    // a whole request: `request`, `consumed`
  kIncomplete,  // the bytes end before the request does
  kMalformed,   // 400: `error` says why
  kTooLarge,    // 413: the body is over max_body_bytes
};

struct ParsedRequest {
  ParseOutcome outcome = ParseOutcome::kIncomplete;
  HttpRequest request;    // when complete
  unsigned version = 11;  // 10 or 11, once the request line was read
  bool keep_alive = false;
  size_t consumed = 0;  // bytes the request took (a pipelined next request follows)
  std::string error;    // when malformed
};

// Reads the first request in `bytes` as a connection of the server does: the header first
// (its framing checked before any body byte is read), then the body. With `piece` > 0 the bytes
// reach the parser `piece` at a time, appended to what it has not consumed yet, as reads from a
// socket do; the outcome does not depend on it.
ParsedRequest ParseHttpRequest(std::string_view bytes, const HttpParseLimits& limits,
                               size_t piece = 0);

}  // namespace tessera::net
