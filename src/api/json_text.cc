#include "api/json_text.h"

#include <array>

#include "common/text.h"

namespace tessera::api {
namespace {

// The bytes Quote must look at: those JSON escapes, and every byte past ASCII (whose text is
// checked for UTF-8). Names, ids and numbers, nearly all that is written, have none.
constexpr std::array<bool, 256> kLookAt = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = c < 0x20 || c == '"' || c == '\\' || c >= 0x80;
  return t;
}();

}  // namespace

bool JsonText::Plain(std::string_view s) {
  for (const char c : s) {
    if (kLookAt[static_cast<unsigned char>(c)]) return false;
  }
  return true;
}

void JsonText::Quote(std::string_view text) {
  if (Plain(text)) {  // written as it is
    out_ += '"';
    out_ += text;
    out_ += '"';
    return;
  }
  QuoteEscaped(text);
}

void JsonText::QuoteEscaped(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  // JSON text is UTF-8: bytes that are not (from a request, a node, an old record) become U+FFFD
  // here, so that no reader of what was written fails on it. ASCII, nearly all that is written,
  // is escaped in one pass; the first byte past it has the whole text checked, and text that
  // is not UTF-8 is written again from its valid copy.
  const size_t start = out_.size();
  std::string valid;
  std::string_view s = text;
  bool checked = false;
  out_ += '"';
  // The runs between bytes that need escaping are appended whole, not byte by byte.
  size_t copied = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u >= 0x80 && !checked) {
      checked = true;
      if (!IsValidUtf8(s)) {
        valid = ToValidUtf8(s);
        s = valid;
        out_.resize(start + 1);  // what was written of it so far, again from the valid copy
        copied = 0;
        i = static_cast<size_t>(-1);
        continue;
      }
    }
    if (u >= 0x20 && u != '"' && u != '\\') continue;  // valid UTF-8 passes through as it came
    out_.append(s.substr(copied, i - copied));
    copied = i + 1;
    switch (u) {
      case '"':
        out_ += "\\\"";
        break;
      case '\\':
        out_ += "\\\\";
        break;
      case '\n':
        out_ += "\\n";
        break;
      case '\r':
        out_ += "\\r";
        break;
      case '\t':
        out_ += "\\t";
        break;
      default:
        out_ += "\\u00";
        out_ += kHex[u >> 4];
        out_ += kHex[u & 15];
    }
  }
  out_.append(s.substr(copied));
  out_ += '"';
}

}  // namespace tessera::api
