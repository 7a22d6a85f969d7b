#include "common/text.h"

#include <algorithm>
#include <cstdint>
#include <utility>

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

// The bidirectional formatting character at s[i] (U+061C, U+200E, U+200F, U+202A..U+202E,
// U+2066..U+2069: they reorder what a terminal shows), as {code point, UTF-8 length}; {0, 0}
// when there is none.
std::pair<uint32_t, size_t> BidiAt(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0; };
  if (b(i) == 0xD8 && b(i + 1) == 0x9C) return {0x061C, 2};
  if (b(i) != 0xE2) return {0, 0};
  const uint32_t cp = 0x2000 + ((b(i + 1) & 0x3Fu) << 6) + (b(i + 2) & 0x3Fu);
  const bool bidi =
      (b(i + 1) == 0x80 && (cp == 0x200E || cp == 0x200F || (cp >= 0x202A && cp <= 0x202E))) ||
      (b(i + 1) == 0x81 && cp >= 0x2066 && cp <= 0x2069);
  return bidi && (b(i + 2) & 0xC0) == 0x80 ? std::pair<uint32_t, size_t>{cp, 3}
                                           : std::pair<uint32_t, size_t>{0, 0};
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
    if ((c == 0xD8 || c == 0xE2) && BidiAt(s, i).second != 0) return true;
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
    } else if (const auto [cp, n] = BidiAt(valid, i); n != 0) {
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 15];
      i += n - 1;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string EscapeOutputForTerminal(std::string_view piece, std::string* carry) {
  std::string text = *carry + std::string(piece);
  carry->clear();
  // A lead byte among the last three whose sequence runs past the end waits for the next piece.
  for (size_t back = 1; !piece.empty() && back <= 3 && back <= text.size(); ++back) {
    const auto c = static_cast<unsigned char>(text[text.size() - back]);
    if (c < 0x80) break;
    if (c < 0xC0) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (need > back) {
      *carry = text.substr(text.size() - back);
      text.resize(text.size() - back);
    }
    break;
  }
  std::string out;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != '\n' && text[i] != '\t') continue;
    out += EscapeForTerminal(std::string_view(text).substr(start, i - start));
    if (i < text.size()) out += text[i];
    start = i + 1;
  }
  return out;
}

std::string PercentEncoded(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
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

std::string OutputCutNote(std::string_view who, int64_t max, std::string_view limit) {
  std::string note = "\n";
  note.append(who);
  note += ": output cut at " + std::to_string(max) + " bytes (";
  note.append(limit);
  note += "); the rest was dropped\n";
  return static_cast<int64_t>(note.size()) * 4 <= max ? note : "";
}

std::string CutForRecord(std::string_view s, size_t max) {
  if (s.size() <= max) return std::string(s);
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return std::string(s.substr(0, cut)) + "...(" + std::to_string(s.size()) + " bytes)";
}

}  // namespace tessera
