// A writer of JSON text for the records the engine commits by the tens of thousands per cycle
// (placements, grants, the job.placed event): appends straight to a string, where building an
// nlohmann::json tree first costs several allocations per field. What it writes is read back
// with nlohmann::json like any other stored JSON.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::api {

class JsonText {
 public:
  JsonText() = default;
  // Room for `capacity` bytes at once: a record's text grows to a few hundred bytes, which
  // doubling from empty reaches through half a dozen allocations.
  explicit JsonText(size_t capacity) { out_.reserve(capacity); }
  JsonText& BeginObject() { return Open('{'); }
  JsonText& EndObject() { return Close('}'); }
  JsonText& BeginArray() { return Open('['); }
  JsonText& EndArray() { return Close(']'); }
  JsonText& Key(std::string_view k) {
    Separate();
    Quote(k);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  JsonText& Str(std::string_view v) {
    Separate();
    Quote(v);
    return *this;
  }
  JsonText& Int(int64_t v) {
    Separate();
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, v).ptr;
    out_.append(digits, end);
    return *this;
  }
  JsonText& Bool(bool v) {
    Separate();
    out_ += v ? "true" : "false";
    return *this;
  }
  // Text that is already JSON (a value written by another JsonText, say).
  JsonText& Raw(std::string_view json) {
    Separate();
    out_ += json;
    return *this;
  }
  // Whether Str writes `s` as it is between quotes: nothing in it to escape or check.
  static bool Plain(std::string_view s);
  const std::string& str() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  JsonText& Open(char c) {
    Separate();
    out_ += c;
    first_ = true;
    return *this;
  }
  JsonText& Close(char c) {
    out_ += c;
    first_ = false;
    return *this;
  }
  // A comma before every value of an object or array but the first; none after a key.
  void Separate() {
    if (after_key_) {
      after_key_ = false;
    } else if (!first_) {
      out_ += ',';
    }
    first_ = false;
  }
  void Quote(std::string_view s);
  void QuoteEscaped(std::string_view s);  // Quote's way for text with bytes to escape or check

  std::string out_;
  bool first_ = true;
  bool after_key_ = false;
};

}  // namespace tessera::api
