#include "cli/table.h"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <iostream>

#include "common/text.h"

namespace tessera::cli {

void PrintTable(const std::vector<std::vector<std::string>>& raw) {
  // Every cell is text from the server (node names, reasons, job names): its control characters
  // are shown escaped, never sent to the terminal as they came.
  std::vector<std::vector<std::string>> rows = raw;
  for (auto& row : rows) {
    for (std::string& cell : row) cell = EscapeForTerminal(cell);
  }
  std::vector<size_t> width;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

std::string HumanDuration(int64_t seconds) {
  const int64_t s = seconds < 0 ? -seconds : seconds;
  if (s < 120) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m";
  if (s < 48 * 3600) {
    const int64_t m = (s % 3600) / 60;
    return std::to_string(s / 3600) + "h" + (m ? std::to_string(m) + "m" : "");
  }
  const int64_t h = (s % 86400) / 3600;
  return std::to_string(s / 86400) + "d" + (h ? std::to_string(h) + "h" : "");
}

namespace {

// "14:32 UTC", or "2026-12-04 14:32 UTC" on another day than `now_s`.
std::string ClockTime(int64_t t, int64_t now_s) {
  const std::time_t tt = static_cast<std::time_t>(t), now = static_cast<std::time_t>(now_s);
  std::tm at{}, today{};
  gmtime_r(&tt, &at);
  gmtime_r(&now, &today);
  char buf[32];
  const bool same_day = at.tm_yday == today.tm_yday && at.tm_year == today.tm_year;
  std::strftime(buf, sizeof buf, same_day ? "%H:%M UTC" : "%Y-%m-%d %H:%M UTC", &at);
  return buf;
}

}  // namespace

std::string HumanTimes(const std::string& text, int64_t now_ms) {
  constexpr int64_t kWallClock = 1'000'000'000;  // 2001: anything earlier is not a wall time
  const int64_t now_s = now_ms / 1000;
  std::string out;
  size_t from = 0;
  for (size_t at = text.find("t=", from); at != std::string::npos; at = text.find("t=", from)) {
    size_t end = at + 2;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    const bool word = at == 0 || !std::isalnum(static_cast<unsigned char>(text[at - 1]));
    if (!word || end == at + 2 || end - at - 2 > 15 || end >= text.size() || text[end] != 's') {
      out += text.substr(from, at + 2 - from);
      from = at + 2;
      continue;
    }
    const int64_t t = std::stoll(text.substr(at + 2, end - at - 2));
    out += text.substr(from, at - from);
    if (t < kWallClock) {
      out += text.substr(at, end + 1 - at);
    } else {
      const int64_t d = t - now_s;
      out += ClockTime(t, now_s) + " (" +
             (d >= 0 ? "in " + HumanDuration(d) : HumanDuration(d) + " ago") + ")";
    }
    from = end + 1;
  }
  return out + text.substr(from);
}

std::string Closest(const std::string& word, const std::vector<std::string>& names) {
  // Edits between a and b: a letter added, dropped, changed, or two neighbours swapped.
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      for (size_t j = 1; j <= b.size(); ++j) {
        d[i][j] = std::min(
            {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
    return d[a.size()][b.size()];
  };
  std::string best;
  size_t best_d = std::max<size_t>(1, word.size() / 3) + 1;
  for (const std::string& n : names) {
    const size_t d = n.rfind(word, 0) == 0 && word.size() >= 4 ? 1 : distance(word, n);
    if (d < best_d) {
      best = n;
      best_d = d;
    }
  }
  return best;
}

std::string Join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string UnknownChoice(const std::string& what, const std::string& given,
                          const std::vector<std::string>& names) {
  const std::string guess = Closest(given, names);
  return "unknown " + what + " '" + EscapeForTerminal(given) + "'" +
         (guess.empty() ? "" : "; did you mean " + guess + "?") + " (one of " + Join(names, ", ") +
         ")";
}

std::string RoundedDown(const std::string& decimal, int64_t exact) {
  if (exact <= 0 || decimal.find_first_not_of("0.") != std::string::npos) return decimal;
  const size_t dot = decimal.find('.');
  if (dot == std::string::npos || dot + 1 == decimal.size()) return decimal;
  return "<" + decimal.substr(0, decimal.size() - 1) + "1";
}

}  // namespace tessera::cli
