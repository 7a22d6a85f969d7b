#include "api/json_text.h"

namespace tessera::api {

void JsonText::Quote(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out_ += '"';
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out_ += "\\\""; break;
      case '\\': out_ += "\\\\"; break;
      case '\n': out_ += "\\n"; break;
      case '\r': out_ += "\\r"; break;
      case '\t': out_ += "\\t"; break;
      default:
        if (u < 0x20) {
          out_ += "\\u00";
          out_ += kHex[u >> 4];
          out_ += kHex[u & 15];
        } else {
          out_ += c;  // UTF-8 passes through as it came
        }
    }
  }
  out_ += '"';
}

}  // namespace tessera::api
