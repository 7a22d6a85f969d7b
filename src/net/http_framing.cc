#include "net/http_framing.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace tessera::net {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::map<std::string, std::string> HeaderFields(const http::request_header<>& header) {
  std::map<std::string, std::string> out;
  for (const auto& f : header) {
    std::string name(f.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out[name] = std::string(f.value());
  }
  return out;
}

void ConfigureParser(BeastRequestParser& p, const HttpParseLimits& limits) {
  p.header_limit(static_cast<std::uint32_t>(std::min<size_t>(limits.max_header_bytes, UINT32_MAX)));
  p.body_limit(limits.max_body_bytes);
}

std::string FramingError(const http::request_header<>& header) {
  // What names the caller or a retried request, once; a path with one segment (a proxy's rules
  // match the path as sent: an encoded '/' decoded before routing passed them).
  if (header.count(http::field::authorization) > 1) return "more than one Authorization field";
  if (header.count("Idempotency-Key") > 1) return "more than one Idempotency-Key field";
  const std::string_view target(header.target().data(), header.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  for (size_t i = path.find('%'); i != std::string_view::npos; i = path.find('%', i + 1)) {
    if (i + 2 < path.size() && path[i + 1] == '2' && (path[i + 2] == 'F' || path[i + 2] == 'f'))
      return "an encoded '/' (%2F) in the path";
  }
  int transfer_encodings = 0;
  std::string_view transfer_encoding;
  std::string content_length;  // the first value, without leading zeros
  bool has_content_length = false;
  for (const auto& f : header) {
    if (f.name() == http::field::transfer_encoding) {
      ++transfer_encodings;
      transfer_encoding = TrimOws(std::string_view(f.value().data(), f.value().size()));
    } else if (f.name() == http::field::content_length) {
      // A field may hold a list ("5, 5"); every value must be the same number.
      std::string_view rest(f.value().data(), f.value().size());
      while (true) {
        const size_t comma = rest.find(',');
        std::string_view v = TrimOws(rest.substr(0, comma));
        if (v.empty() ||
            !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          return "Content-Length is not a number";
        }
        while (v.size() > 1 && v.front() == '0') v.remove_prefix(1);
        if (!has_content_length) {
          has_content_length = true;
          content_length = std::string(v);
        } else if (v != content_length) {
          return "differing Content-Length values";
        }
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    }
  }
  if (transfer_encodings == 0) return "";
  if (transfer_encodings > 1) return "more than one Transfer-Encoding field";
  if (!EqualsNoCase(transfer_encoding, "chunked")) return "Transfer-Encoding other than chunked";
  if (has_content_length) return "both Transfer-Encoding and Content-Length";
  if (header.version() < 11) return "Transfer-Encoding in an HTTP/1.0 request";
  return "";
}

void ParseQuery(const std::string& q, std::map<std::string, std::string>* out) {
  size_t i = 0;
  while (i <= q.size()) {
    size_t amp = q.find('&', i);
    if (amp == std::string::npos) amp = q.size();
    const std::string kv = q.substr(i, amp - i);
    if (!kv.empty()) {
      const size_t eq = kv.find('=');
      (*out)[HttpServer::Decode(kv.substr(0, eq), true)] =
          eq == std::string::npos ? "" : HttpServer::Decode(kv.substr(eq + 1), true);
    }
    i = amp + 1;
  }
}

HttpRequest ToHttpRequest(http::request<http::string_body>&& msg,
                          std::map<std::string, std::string> header) {
  HttpRequest req;
  req.method = std::string(msg.method_string());
  const std::string target(msg.target());
  const size_t q = target.find('?');
  req.path = HttpServer::Decode(target.substr(0, q), false);
  if (q != std::string::npos) ParseQuery(target.substr(q + 1), &req.query);
  // The header's fields as read before the body: Beast adds a chunked body's trailer fields to
  // the same list (each beside the header's field of its name), and one named Authorization
  // stood for the header's (the red team).
  req.headers = std::move(header);
  req.body = std::move(msg.body());
  return req;
}

ParsedRequest ParseHttpRequest(std::string_view bytes, const HttpParseLimits& limits,
                               size_t piece) {
  ParsedRequest out;
  BeastRequestParser p;
  ConfigureParser(p, limits);
  p.eager(false);  // stop after the header, as the server's header read does
  const size_t step = piece == 0 ? std::max<size_t>(bytes.size(), 1) : piece;
  size_t fed = 0;  // bytes the parser consumed
  size_t avail = std::min(bytes.size(), step);
  bool header_checked = false;
  std::map<std::string, std::string> header_fields;
  while (true) {
    beast::error_code ec;
    const size_t n = p.put(asio::const_buffer(bytes.data() + fed, avail - fed), ec);
    fed += n;
    const bool header_to_check = p.is_header_done() && !header_checked;
    if (ec == http::error::need_more || (!ec && n == 0 && !p.is_done() && !header_to_check)) {
      if (avail == bytes.size()) return out;  // incomplete
      avail = std::min(bytes.size(), avail + step);
      continue;
    }
    if (ec == http::error::body_limit) {
      out.outcome = ParseOutcome::kTooLarge;
      return out;
    }
    if (ec) {
      out.outcome = ParseOutcome::kMalformed;
      out.error = ec.message();
      return out;
    }
    if (header_to_check) {
      header_checked = true;
      out.version = p.get().version();
      out.keep_alive = p.get().keep_alive();
      out.error = FramingError(p.get());
      header_fields = HeaderFields(p.get());
      if (!out.error.empty()) {
        out.outcome = ParseOutcome::kMalformed;
        return out;
      }
      p.eager(true);  // then the body, as far as the bytes go
    }
    if (p.is_done()) {
      out.outcome = ParseOutcome::kComplete;
      out.consumed = fed;
      out.request = ToHttpRequest(p.release(), std::move(header_fields));
      return out;
    }
  }
}

}  // namespace tessera::net
