#include "common/text.h"

#include <algorithm>
#include <cstdint>

namespace tessera {
namespace {

// The length of the well-formed UTF-8 sequence at s[i], or 0 when the byte there starts none.
size_t SequenceAt(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  size_t ascii = 0;  // nearly every text checked is ASCII: passed over byte by byte first
  while (ascii < s.size() && static_cast<unsigned char>(s[ascii]) < 0x80) ++ascii;
  for (size_t i = ascii; i < s.size();) {
    const size_t n = SequenceAt(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

bool HasControlCharacters(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) return true;
    // U+0080..U+009F are C2 80..C2 9F in UTF-8.
    if (c == 0xC2 && i + 1 < s.size()) {
      const auto d = static_cast<unsigned char>(s[i + 1]);
      if (d >= 0x80 && d <= 0x9F) return true;
    }
  }
  return false;
}

std::string ToValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t copied = 0;  // s before this is in `out`; valid runs are copied whole
  for (size_t i = 0; i < s.size();) {
    const size_t n = SequenceAt(s, i);
    if (n != 0) {
      i += n;
      continue;
    }
    out.append(s.substr(copied, i - copied));
    out += "\xEF\xBF\xBD";  // U+FFFD
    copied = ++i;
  }
  out.append(s.substr(copied));
  return out;
}

std::string EscapeForTerminal(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  const std::string valid = ToValidUtf8(s);
  std::string out;
  out.reserve(valid.size());
  for (size_t i = 0; i < valid.size(); ++i) {
    const auto c = static_cast<unsigned char>(valid[i]);
    if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else if (c == 0xC2 && i + 1 < valid.size() &&
               static_cast<unsigned char>(valid[i + 1]) <= 0x9F &&
               static_cast<unsigned char>(valid[i + 1]) >= 0x80) {
      const auto d = static_cast<unsigned char>(valid[++i]);
      out += "\\u00";
      out += kHex[d >> 4];
      out += kHex[d & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string EscapeChars(std::string_view s,
                        std::initializer_list<std::pair<char, std::string_view>> escapes) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const auto it =
        std::find_if(escapes.begin(), escapes.end(),
                     [c](const std::pair<char, std::string_view>& e) { return e.first == c; });
    if (it == escapes.end()) {
      out += c;
    } else {
      out += it->second;
    }
  }
  return out;
}

}  // namespace tessera
