#include "common/log.h"

#include <spdlog/formatter.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <cmath>
#include <ctime>
#include <mutex>

#include "common/enum_names.h"

namespace tessera::log {

namespace detail {
std::atomic<int> g_min_level{static_cast<int>(Level::kInfo)};
}

namespace {

std::atomic<Format> g_format{Format::kText};

using Buffer = spdlog::memory_buf_t;

void Append(Buffer& out, std::string_view s) { out.append(s.data(), s.data() + s.size()); }

void AppendHex4(Buffer& out, unsigned v) {
  static const char kHex[] = "0123456789abcdef";
  const char u[6] = {
      '\\', 'u', kHex[(v >> 12) & 15], kHex[(v >> 8) & 15], kHex[(v >> 4) & 15], kHex[v & 15]};
  out.append(u, u + 6);
}

// The two-character escape of a line feed, carriage return or tab (the same in JSON and in the
// text format), or nullptr for any other byte.
const char* ShortEscape(unsigned char c) {
  switch (c) {
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      return nullptr;
  }
}

// The length of the valid UTF-8 sequence at s[i], or 0 when the bytes there are not one.
size_t Utf8Length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  unsigned min = 0;
  unsigned cp = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, min = 0x80, cp = c & 0x1Fu;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, min = 0x800, cp = c & 0x0Fu;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, min = 0x10000, cp = c & 0x07u;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

// A JSON string literal, quotes included.
void AppendJsonString(Buffer& out, std::string_view s) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (const char* escape = ShortEscape(c)) {
      Append(out, escape);
    } else if (c < 0x20 || c == 0x7F) {
      AppendHex4(out, c);
    } else if (c >= 0x80) {
      const size_t n = Utf8Length(s, i);
      if (n == 0) {
        AppendHex4(out, 0xFFFD);  // not UTF-8: the replacement character, so the line still parses
        ++i;
        continue;
      }
      out.append(s.data() + i, s.data() + i + n);
      i += n;
      continue;
    } else {
      out.push_back(static_cast<char>(c));
    }
    ++i;
  }
  out.push_back('"');
}

// Text: control characters escaped (one event, one line); quoted when `quote_if_needed` and the
// value is empty or has a space, quote, '=' or an escape.
void AppendText(Buffer& out, std::string_view s, bool quote_if_needed) {
  bool quote = false;
  if (quote_if_needed) {
    quote = s.empty();
    for (char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      if (c <= 0x20 || c == '"' || c == '=' || c == 0x7F) {
        quote = true;
        break;
      }
    }
  }
  if (quote) out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (quote && (c == '"' || c == '\\')) {
      out.push_back('\\');
      out.push_back(ch);
    } else if (const char* escape = ShortEscape(c)) {
      Append(out, escape);
    } else if (c < 0x20 || c == 0x7F) {
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", c);
    } else {
      out.push_back(ch);
    }
  }
  if (quote) out.push_back('"');
}

void AppendValue(Buffer& out, const Field& f, Format format) {
  switch (f.kind()) {
    case Field::Kind::kString:
      if (format == Format::kJson) {
        AppendJsonString(out, f.str());
      } else {
        AppendText(out, f.str(), true);
      }
      return;
    case Field::Kind::kInt:
      fmt::format_to(std::back_inserter(out), "{}", f.int_value());
      return;
    case Field::Kind::kUint:
      fmt::format_to(std::back_inserter(out), "{}", f.uint_value());
      return;
    case Field::Kind::kDouble:
      if (std::isfinite(f.double_value())) {
        fmt::format_to(std::back_inserter(out), "{}", f.double_value());
      } else {
        Append(out, format == Format::kJson ? "null" : "NaN");
      }
      return;
    case Field::Kind::kBool:
      Append(out, f.bool_value() ? "true" : "false");
      return;
  }
}

// "2025-01-02T03:04:05.678Z"; the seconds part is kept per thread (lines come many a second).
void AppendTime(Buffer& out, spdlog::log_clock::time_point tp) {
  using std::chrono::duration_cast;
  const auto since = tp.time_since_epoch();
  const auto secs = duration_cast<std::chrono::seconds>(since);
  auto ms = duration_cast<std::chrono::milliseconds>(since - secs).count();
  if (ms < 0) ms = 0;
  thread_local std::time_t cached_secs = -1;
  thread_local char cached[24];
  const std::time_t t = static_cast<std::time_t>(secs.count());
  if (t != cached_secs) {
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm);
    cached_secs = t;
  }
  Append(out, cached);
  fmt::format_to(std::back_inserter(out), ".{:03}Z", ms);
}

Level FromSpd(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
    case spdlog::level::debug:
      return Level::kDebug;
    case spdlog::level::info:
      return Level::kInfo;
    case spdlog::level::warn:
      return Level::kWarn;
    default:
      return Level::kError;
  }
}

spdlog::level::level_enum ToSpd(Level l) {
  switch (l) {
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kOff:
      break;
  }
  return spdlog::level::off;
}

// Wraps the payload Logger::Log built (message and fields, already in this format) with the
// time, level and component.
class LineFormatter final : public spdlog::formatter {
 public:
  explicit LineFormatter(Format format) : format_(format) {}

  void format(const spdlog::details::log_msg& msg, Buffer& dest) override {
    const std::string_view component(msg.logger_name.data(), msg.logger_name.size());
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    const Level level = FromSpd(msg.level);
    if (format_ == Format::kJson) {
      Append(dest, "{\"time\":\"");
      AppendTime(dest, msg.time);
      Append(dest, "\",\"level\":\"");
      Append(dest, LevelName(level));
      Append(dest, "\",\"component\":");
      AppendJsonString(dest, component);
      dest.push_back(',');
      Append(dest, payload);
      Append(dest, "}\n");
    } else {
      static const char* const kNames[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
      AppendTime(dest, msg.time);
      dest.push_back(' ');
      Append(dest, kNames[static_cast<int>(level)]);
      dest.push_back(' ');
      Append(dest, component);
      Append(dest, ": ");
      Append(dest, payload);
      dest.push_back('\n');
    }
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<LineFormatter>(format_);
  }

 private:
  Format format_;
};

// Hands each formatted line to a function (tests).
class FunctionSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit FunctionSink(std::function<void(std::string_view)> fn) : fn_(std::move(fn)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    Buffer line;
    formatter_->format(msg, line);
    fn_(std::string_view(line.data(), line.size()));
  }
  void flush_() override {}

 private:
  std::function<void(std::string_view)> fn_;
};

// Every Logger writes into this one sink; Configure() points it at stderr or a test's function.
std::shared_ptr<spdlog::sinks::dist_sink_mt> Root() {
  static const auto root = [] {
    auto r = std::make_shared<spdlog::sinks::dist_sink_mt>();
    r->set_level(spdlog::level::trace);
    auto err = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    err->set_formatter(std::make_unique<LineFormatter>(Format::kText));
    r->set_sinks({err});
    return r;
  }();
  return root;
}

void Point(Level level, Format format, std::shared_ptr<spdlog::sinks::sink> sink) {
  sink->set_level(spdlog::level::trace);
  sink->set_formatter(std::make_unique<LineFormatter>(format));
  g_format.store(format);
  detail::g_min_level.store(static_cast<int>(level));
  Root()->set_sinks({std::move(sink)});
}

}  // namespace

Result<Level> ParseLevel(std::string_view name) {
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn" || name == "warning") return Level::kWarn;
  if (name == "error") return Level::kError;
  return Status::InvalidArgument("unknown log level '" + std::string(name) +
                                 "' (debug, info, warn, error)");
}

Result<Format> ParseFormat(std::string_view name) {
  if (name == "text") return Format::kText;
  if (name == "json") return Format::kJson;
  return Status::InvalidArgument("unknown log format '" + std::string(name) + "' (text, json)");
}

const char* LevelName(Level level) {
  static constexpr auto kNames = NamesUpTo<Level::kOff>("debug", "info", "warn", "error", "off");
  return kNames.Of(level, "off");
}

void Configure(Level level, Format format) {
  Point(level, format, std::make_shared<spdlog::sinks::stderr_sink_mt>());
}

void ConfigureForTesting(Level level, Format format,
                         std::function<void(std::string_view line)> sink) {
  Point(level, format, std::make_shared<FunctionSink>(std::move(sink)));
}

Level CurrentLevel() { return static_cast<Level>(detail::g_min_level.load()); }
Format CurrentFormat() { return g_format.load(); }

Logger::Logger(std::string component)
    : component_(std::move(component)),
      logger_(std::make_shared<spdlog::logger>(component_, Root())) {
  logger_->set_level(spdlog::level::trace);  // the level is decided by Enabled(), before formatting
}

Logger::~Logger() = default;

void Logger::Log(Level level, std::string_view message, Fields fields) const {
  if (!Enabled(level)) return;
  const Format format = g_format.load(std::memory_order_relaxed);
  Buffer payload;
  if (format == Format::kJson) {
    Append(payload, "\"message\":");
    AppendJsonString(payload, message);
    for (const Field& f : fields) {
      payload.push_back(',');
      AppendJsonString(payload, f.key());
      payload.push_back(':');
      AppendValue(payload, f, format);
    }
  } else {
    AppendText(payload, message, false);
    for (const Field& f : fields) {
      payload.push_back(' ');
      AppendText(payload, f.key(), false);
      payload.push_back('=');
      AppendValue(payload, f, format);
    }
  }
  logger_->log(ToSpd(level), spdlog::string_view_t(payload.data(), payload.size()));
}

}  // namespace tessera::log
