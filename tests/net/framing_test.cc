// Request framing without sockets (net/http_framing.h): what Beast accepts and the server must
// not (a Transfer-Encoding other than chunked, Transfer-Encoding with Content-Length, differing
// Content-Length values), what it still reads, and that reading in pieces changes nothing.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/http_framing.h"

namespace tessera::net {
namespace {

ParsedRequest Parse(const std::string& bytes, size_t piece = 0) {
  return ParseHttpRequest(bytes, HttpParseLimits{}, piece);
}

TEST(Framing, ChunkedThenIdentityIsRefusedNotReadAsAnEmptyBody) {
  const std::string req =
      "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n"
      "5\r\nhello\r\n0\r\n\r\n";
  // What Beast alone makes of it: a complete request with no body, the rest left for a "next"
  // request (the smuggling a proxy that reads it as chunked would not see).
  BeastRequestParser beast;
  beast.eager(true);
  boost::beast::error_code ec;
  const size_t n = beast.put(boost::asio::buffer(req), ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(beast.is_done());
  EXPECT_EQ(beast.get().body(), "");
  EXPECT_LT(n, req.size());

  const ParsedRequest p = Parse(req);
  EXPECT_EQ(p.outcome, ParseOutcome::kMalformed);
  EXPECT_EQ(p.error, "Transfer-Encoding other than chunked");
}

TEST(Framing, EveryAmbiguousLengthIsRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"Transfer-Encoding: gzip, chunked\r\n", "Transfer-Encoding other than chunked"},
      {"Transfer-Encoding: identity\r\n", "Transfer-Encoding other than chunked"},
      {"Transfer-Encoding: chunked, identity\r\nContent-Length: 5\r\n",
       "Transfer-Encoding other than chunked"},
      {"Transfer-Encoding: xchunked\r\n", "Transfer-Encoding other than chunked"},
      {"Transfer-Encoding: \r\n", "Transfer-Encoding other than chunked"},
      {"Content-Length: 5\r\nContent-Length: 6\r\n", ""},  // Beast refuses this one itself
      {"Content-Length: 5, 6\r\n", ""},
      {"Content-Length: +5\r\n", ""},
  };
  for (const auto& [fields, why] : cases) {
    const ParsedRequest p = Parse("POST /x HTTP/1.1\r\nHost: x\r\n" + fields + "\r\nhello");
    EXPECT_EQ(p.outcome, ParseOutcome::kMalformed) << fields;
    if (!why.empty()) {
      EXPECT_EQ(p.error, why) << fields;
    }
  }
  // Transfer-Encoding in HTTP/1.0.
  ParsedRequest p = Parse("POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  EXPECT_EQ(p.outcome, ParseOutcome::kMalformed);
  EXPECT_EQ(p.error, "Transfer-Encoding in an HTTP/1.0 request");
}

TEST(Framing, FramingErrorRefusesWhatBeastLetsThrough) {
  // Headers Beast parses without an error: the check itself must refuse them.
  namespace http = boost::beast::http;
  http::request_header<> h;
  h.version(11);
  h.insert(http::field::transfer_encoding, "chunked");
  EXPECT_EQ(FramingError(h), "");
  h.insert(http::field::content_length, "5");
  EXPECT_EQ(FramingError(h), "both Transfer-Encoding and Content-Length");
  http::request_header<> two;
  two.version(11);
  two.insert(http::field::content_length, "5");
  two.insert(http::field::content_length, "7");
  EXPECT_EQ(FramingError(two), "differing Content-Length values");
  http::request_header<> same;
  same.version(11);
  same.insert(http::field::content_length, "5");
  same.insert(http::field::content_length, "005, 5");
  EXPECT_EQ(FramingError(same), "");
  http::request_header<> te2;
  te2.version(11);
  te2.insert(http::field::transfer_encoding, "chunked");
  te2.insert(http::field::transfer_encoding, "chunked");
  EXPECT_EQ(FramingError(te2), "more than one Transfer-Encoding field");
}

TEST(Framing, SoundRequestsAreReadWholeInAnyPieces) {
  const std::string chunked =
      "POST /v1/jobs/j-1/cancel?reason=a%20b&x=1+2 HTTP/1.1\r\nHost: x\r\nX-Name: V\r\n"
      "Transfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\nGET /next "
      "HTTP/1.1\r\n";
  const std::string sized =
      "PUT /a%20b HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhelloGET";
  for (size_t piece : {0, 1, 2, 3, 7, 64}) {
    ParsedRequest p = Parse(chunked, piece);
    ASSERT_EQ(p.outcome, ParseOutcome::kComplete) << piece << ": " << p.error;
    EXPECT_EQ(p.request.method, "POST");
    EXPECT_EQ(p.request.path, "/v1/jobs/j-1/cancel");
    EXPECT_EQ(p.request.param("reason"), "a b");
    EXPECT_EQ(p.request.param("x"), "1 2");
    EXPECT_EQ(p.request.header("x-name"), "V");
    EXPECT_EQ(p.request.body, "hello world");
    EXPECT_EQ(chunked.substr(p.consumed), "GET /next HTTP/1.1\r\n");
    EXPECT_TRUE(p.keep_alive);

    p = Parse(sized, piece);
    ASSERT_EQ(p.outcome, ParseOutcome::kComplete) << piece << ": " << p.error;
    EXPECT_EQ(p.request.path, "/a b");
    EXPECT_EQ(p.request.body, "hello");
    EXPECT_EQ(sized.substr(p.consumed), "GET");
  }
}

// The red team: a chunked request's trailer fields were read as header fields, the last copy
// winning, so that a trailer's Authorization stood for the header's (bob's header, the admin's
// token in the trailer: the node cordoned "by admin"), and a trailer alone authenticated. A
// proxy that checks or sets the header saw another caller than the server did. Trailers are
// not headers now; two Authorization or Idempotency-Key fields are refused, and so is an
// encoded '/' in the path (it was decoded before routing: /v1/agent%2Fheartbeat reached the
// agent's route past a proxy's rule for /v1/agent/).
TEST(Framing, ATrailerIsNoHeaderAndWhatNamesTheCallerOrRouteIsUnambiguous) {
  const std::string trailer =
      "POST /v1/nodes/n1/cordon HTTP/1.1\r\nAuthorization: Bearer tok-bob\r\n"
      "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nAuthorization: Bearer tok-admin\r\n"
      "Idempotency-Key: k\r\n\r\n";
  for (size_t piece : {0, 1, 5}) {
    const ParsedRequest p = Parse(trailer, piece);
    ASSERT_EQ(p.outcome, ParseOutcome::kComplete) << p.error;
    EXPECT_EQ(p.request.header("authorization"), "Bearer tok-bob");
    EXPECT_EQ(p.request.header("idempotency-key"), "");
    EXPECT_EQ(p.request.body, "{}");
  }
  const ParsedRequest alone = Parse(
      "POST /v1/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n"
      "Authorization: Bearer tok-admin\r\n\r\n");
  ASSERT_EQ(alone.outcome, ParseOutcome::kComplete) << alone.error;
  EXPECT_EQ(alone.request.header("authorization"), "");
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"GET /v1/jobs HTTP/1.1\r\nAuthorization: Bearer a\r\nauthorization: Bearer b\r\n\r\n",
       "more than one Authorization field"},
      {"POST /v1/jobs HTTP/1.1\r\nIdempotency-Key: a\r\nIdempotency-Key: b\r\n"
       "Content-Length: 0\r\n\r\n",
       "more than one Idempotency-Key field"},
      {"POST /v1/agent%2Fheartbeat HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
       "an encoded '/' (%2F) in the path"},
      {"GET /v1/jobs/j-1%2foutput HTTP/1.1\r\n\r\n", "an encoded '/' (%2F) in the path"},
  };
  for (const auto& [bytes, why] : refused) {
    const ParsedRequest p = Parse(bytes);
    EXPECT_EQ(p.outcome, ParseOutcome::kMalformed) << bytes;
    EXPECT_EQ(p.error, why) << bytes;
  }
}

TEST(Framing, IncompleteAndOversizedRequests) {
  EXPECT_EQ(Parse("").outcome, ParseOutcome::kIncomplete);
  EXPECT_EQ(Parse("GET / HTTP/1.1\r\nHost: x\r\n").outcome, ParseOutcome::kIncomplete);
  EXPECT_EQ(Parse("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nhello").outcome,
            ParseOutcome::kIncomplete);
  HttpParseLimits small;
  small.max_body_bytes = 4;
  EXPECT_EQ(ParseHttpRequest("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", small).outcome,
            ParseOutcome::kTooLarge);
  small.max_header_bytes = 32;
  EXPECT_EQ(
      ParseHttpRequest("GET / HTTP/1.1\r\nX-Long: " + std::string(64, 'a') + "\r\n\r\n", small)
          .outcome,
      ParseOutcome::kMalformed);
  EXPECT_EQ(Parse("NOT HTTP\r\n\r\n").outcome, ParseOutcome::kMalformed);
}

}  // namespace
}  // namespace tessera::net
