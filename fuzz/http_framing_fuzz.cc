// The HTTP server's reading of a request (net/http_framing.h): Beast's parser with the server's
// limits, the strict framing checks, then the HttpRequest handlers see, as ParseHttpRequest runs
// them for a connection, without sockets.
//
// Input: two bytes, then the bytes a client sent.
//   byte 0: the bytes are read whole, and again (value % 32) at a time (0: one at a time), each
//           piece appended to what the parser has not consumed (as reads from a socket are);
//   byte 1: the body limit: 0 the server's (1 MiB), else value * 8 bytes (413 past it).
//
// Properties checked (a failure traps and leaves the input):
//   - whether a request is complete does not depend on how the bytes were cut (a request means
//     the same thing in any TCP segments), nor do a complete request's length, method, path,
//     query, headers and body. Which refusal an unfinished request gets may depend on it: Beast
//     reports what it finds when it has the bytes to look (found by this target, and harmless: no
//     request is served either way, and the deadlines bound the wait):
//       - a request line whose version is shorter than "HTTP/1.1", read 4 bytes at a time
//         ("PUT /v1/agnt-Length: 40\r\n\r\n0123..."), makes Beast wait for more bytes and then
//         look for the header's end only past them: "incomplete" in pieces, "malformed" whole;
//       - a chunk size over the body limit followed by an unfinished chunk extension
//         ("DDDDD4;   ext=\"\r\n..."): "too large" in pieces, "incomplete" whole;
//   - a complete request took no more than the input and its body is within the limit;
//   - a complete request's framing is sound: no Transfer-Encoding but "chunked" (any case), and
//     never Transfer-Encoding with Content-Length;
//   - a request that is not complete has nothing to hand to a handler.
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "net/http_framing.h"

namespace {

using tessera::net::ParsedRequest;
using tessera::net::ParseOutcome;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t piece = data[0] % 32;
  tessera::net::HttpParseLimits limits;
  if (data[1] != 0) limits.max_body_bytes = static_cast<size_t>(data[1]) * 8;
  const std::string_view bytes = tessera::fuzz::AsText(data + 2, size - 2);

  const ParsedRequest whole = tessera::net::ParseHttpRequest(bytes, limits, 0);
  const ParsedRequest cut = tessera::net::ParseHttpRequest(bytes, limits, piece == 0 ? 1 : piece);
  Check((whole.outcome == ParseOutcome::kComplete) == (cut.outcome == ParseOutcome::kComplete));
  if (whole.outcome != ParseOutcome::kComplete) {
    Check(whole.request.method.empty() && whole.request.body.empty() && whole.consumed == 0);
    Check(cut.request.method.empty() && cut.request.body.empty() && cut.consumed == 0);
    return 0;
  }
  Check(whole.consumed == cut.consumed);
  Check(whole.consumed <= bytes.size());
  const tessera::net::HttpRequest& a = whole.request;
  const tessera::net::HttpRequest& b = cut.request;
  Check(a.method == b.method && a.path == b.path && a.query == b.query && a.headers == b.headers &&
        a.body == b.body);
  Check(a.body.size() <= limits.max_body_bytes);
  const auto te = a.headers.find("transfer-encoding");
  if (te != a.headers.end()) {
    std::string v = te->second;
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.pop_back();
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.erase(0, 1);
    Check(Lower(v) == "chunked");
    Check(a.headers.count("content-length") == 0);
  }
  return 0;
}
