// Structured logs for the long-running commands (`tessera serve`, `tessera agent`), on spdlog.
//
// One process-wide configuration: a level (debug < info < warn < error; lines below it are
// dropped) and a format, written to stderr (where systemd's journal takes it):
//
//   text  2025-01-02T03:04:05.678Z INFO  serve: listening on http://127.0.0.1:8080 key=value ...
//   json  {"time":"2025-01-02T03:04:05.678Z","level":"info","component":"serve",
//          "message":"listening on http://127.0.0.1:8080","key":"value",...}   (one per line)
//
// Times are UTC, RFC 3339 with milliseconds. In text, a value with a space, quote, '=' or a
// control character is quoted and escaped, so one event is always one line; in JSON, strings
// are escaped and bytes that are not UTF-8 become U+FFFD, so every line parses.
//
//   static const log::Logger kLog("agent");
//   kLog.Info("registered with the control plane", {{"node", name}, {"heartbeat_ms", 1000}});
//
// Cheap when off: Enabled() is one relaxed atomic load, and Log() returns before formatting when
// the level is disabled. Fields hold views: nothing is copied before that check (build costly
// values only under `if (log::Enabled(...))`).
//
// Thread-safety: Log() from any thread; lines are written whole. Configure() at start-up, before
// other threads log (it may be called again; lines being written meanwhile go to either sink).
#pragma once

#include <atomic>
#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace spdlog {
class logger;
}

namespace tessera::log {

enum class Level : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };
enum class Format { kText, kJson };

// "debug", "info", "warn" (or "warning"), "error"; "text", "json". InvalidArgument otherwise.
Result<Level> ParseLevel(std::string_view name);
Result<Format> ParseFormat(std::string_view name);
const char* LevelName(Level level);  // "debug", ...

namespace detail {
extern std::atomic<int> g_min_level;
}

// Whether a line at `level` is written.
inline bool Enabled(Level level) {
  return static_cast<int>(level) >= detail::g_min_level.load(std::memory_order_relaxed) &&
         level != Level::kOff;
}

// Lines at `level` and above, in `format`, to stderr. The default before any call: info, text.
void Configure(Level level, Format format);
// The same, with each line (its newline included) handed to `sink` instead of stderr: tests.
void ConfigureForTesting(Level level, Format format,
                         std::function<void(std::string_view line)> sink);
Level CurrentLevel();
Format CurrentFormat();

// One key-value field of a line. Holds a view of a string: the string must outlive the call.
class Field {
 public:
  enum class Kind { kString, kInt, kUint, kDouble, kBool };
  Field(std::string_view key, std::string_view value)
      : key_(key), kind_(Kind::kString), s_(value) {}
  Field(std::string_view key, const char* value)
      : key_(key), kind_(Kind::kString), s_(value ? value : "") {}
  Field(std::string_view key, const std::string& value)
      : key_(key), kind_(Kind::kString), s_(value) {}
  Field(std::string_view key, bool value) : key_(key), kind_(Kind::kBool), b_(value) {}
  Field(std::string_view key, double value) : key_(key), kind_(Kind::kDouble), d_(value) {}
  template <std::signed_integral T>
  requires(!std::same_as<T, bool> && !std::same_as<T, char>) Field(std::string_view key, T value)
      : key_(key), kind_(Kind::kInt), i_(static_cast<int64_t>(value)) {}
  template <std::unsigned_integral T>
  requires(!std::same_as<T, bool> && !std::same_as<T, char>) Field(std::string_view key, T value)
      : key_(key), kind_(Kind::kUint), u_(static_cast<uint64_t>(value)) {}

  std::string_view key() const { return key_; }
  Kind kind() const { return kind_; }
  std::string_view str() const { return s_; }
  int64_t int_value() const { return i_; }
  uint64_t uint_value() const { return u_; }
  double double_value() const { return d_; }
  bool bool_value() const { return b_; }

 private:
  std::string_view key_;
  Kind kind_;
  std::string_view s_;
  int64_t i_ = 0;
  uint64_t u_ = 0;
  double d_ = 0;
  bool b_ = false;
};

using Fields = std::initializer_list<Field>;

// A named source of lines ("serve", "agent", "http"): the `component` of each line.
class Logger {
 public:
  explicit Logger(std::string component);
  ~Logger();
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  void Log(Level level, std::string_view message, Fields fields = {}) const;
  void Debug(std::string_view message, Fields fields = {}) const {
    Log(Level::kDebug, message, fields);
  }
  void Info(std::string_view message, Fields fields = {}) const {
    Log(Level::kInfo, message, fields);
  }
  void Warn(std::string_view message, Fields fields = {}) const {
    Log(Level::kWarn, message, fields);
  }
  void Error(std::string_view message, Fields fields = {}) const {
    Log(Level::kError, message, fields);
  }

  const std::string& component() const { return component_; }

 private:
  std::string component_;
  std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace tessera::log
