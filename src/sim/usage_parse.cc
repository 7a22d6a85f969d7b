// The two telemetry formats of usage_history.h: CSV and Prometheus range-query JSON.
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "sim/usage_history.h"

namespace tessera::sim::usage {
namespace {

constexpr int64_t kMaxValue = int64_t{1} << 53;  // far past any real value; keeps products exact

// Days since 1970-01-01 of a proleptic Gregorian date.
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

bool Digits(std::string_view s, size_t at, size_t n, int64_t* out) {
  if (at + n > s.size()) return false;
  int64_t v = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

// Epoch seconds ("1700000000", "1700000000.25") or "YYYY-MM-DDTHH:MM:SS[.fff]Z", to ms.
bool ParseTimestamp(std::string_view s, int64_t* ms) {
  if (s.size() >= 20 && s[4] == '-' && s[7] == '-' && (s[10] == 'T' || s[10] == ' ')) {
    int64_t y, mo, d, h, mi, sec;
    if (!Digits(s, 0, 4, &y) || !Digits(s, 5, 2, &mo) || !Digits(s, 8, 2, &d) ||
        !Digits(s, 11, 2, &h) || s[13] != ':' || !Digits(s, 14, 2, &mi) || s[16] != ':' ||
        !Digits(s, 17, 2, &sec)) {
      return false;
    }
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return false;
    int64_t frac = 0;
    size_t i = 19;
    if (s[i] == '.') {
      int64_t scale = 100;
      for (++i; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
        frac += (s[i] - '0') * scale;
        scale /= 10;
      }
    }
    if (i + 1 != s.size() || s[i] != 'Z') return false;
    *ms = ((DaysFromCivil(y, mo, d) * 24 + h) * 60 + mi) * 60000 + sec * 1000 + frac;
    return true;
  }
  return ParseDecimal(s, 1000, ms);
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Splits one CSV line; quoted fields may hold commas ("" is a quote). False on an open quote.
bool SplitCsv(std::string_view line, std::vector<std::string>* out) {
  out->clear();
  size_t i = 0;
  while (true) {
    std::string field;
    while (i < line.size() && line[i] == ' ') ++i;
    if (i < line.size() && line[i] == '"') {
      ++i;
      bool closed = false;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          closed = true;
          break;
        }
        field += line[i++];
      }
      if (!closed) return false;
      while (i < line.size() && line[i] != ',') ++i;
    } else {
      const size_t end = std::min(line.find(',', i), line.size());
      field = std::string(Trim(line.substr(i, end - i)));
      i = end;
    }
    out->push_back(std::move(field));
    if (i >= line.size()) return true;
    ++i;  // the comma
  }
}

std::string Quoted(std::string_view v) {
  std::string s(v.substr(0, 40));
  if (v.size() > 40) s += "...";
  return "'" + s + "'";
}

// Index of each workload name in `h->workloads`.
struct Index {
  std::unordered_map<std::string, size_t> of;
  size_t Get(History* h, const std::string& name) {
    auto [it, added] = of.try_emplace(name, h->workloads.size());
    if (added) {
      h->workloads.emplace_back();
      h->workloads.back().name = name;
    }
    return it->second;
  }
  explicit Index(const History& h) {
    for (size_t i = 0; i < h.workloads.size(); ++i) of[h.workloads[i].name] = i;
  }
};

}  // namespace

bool ParseDecimal(std::string_view text, int64_t scale, int64_t* out) {
  std::string_view s = Trim(text);
  if (s.empty() || s.size() > 64) return false;
  int64_t exp = 0;
  if (size_t e = s.find_first_of("eE"); e != std::string_view::npos) {
    std::string_view es = s.substr(e + 1);
    s = s.substr(0, e);
    bool neg = false;
    if (!es.empty() && (es[0] == '-' || es[0] == '+')) {
      neg = es[0] == '-';
      es.remove_prefix(1);
    }
    if (es.empty() || es.size() > 3) return false;
    for (char c : es) {
      if (c < '0' || c > '9') return false;
      exp = exp * 10 + (c - '0');
    }
    if (neg) exp = -exp;
  }
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  // Digits before and after the point, then the value * scale * 10^exp, truncated.
  std::string digits;
  int64_t point = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '.' && point < 0) {
      point = static_cast<int64_t>(digits.size());
    } else if (s[i] >= '0' && s[i] <= '9') {
      digits += s[i];
    } else {
      return false;
    }
  }
  if (digits.empty()) return false;
  if (point < 0) point = static_cast<int64_t>(digits.size());
  // Shift the point by exp and by log10(scale).
  int64_t sc = scale, shift = exp;
  while (sc >= 10) {
    if (sc % 10 != 0) return false;
    sc /= 10;
    ++shift;
  }
  const int64_t int_len = point + shift;  // digits that make up the integer part
  int64_t v = 0;
  for (int64_t i = 0; i < int_len; ++i) {
    const int d =
        i < static_cast<int64_t>(digits.size()) ? digits[static_cast<size_t>(i)] - '0' : 0;
    if (v > (kMaxValue - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

Status ParseUsageCsv(std::string_view text, std::string_view source, History* into) {
  const std::string src(source);
  if (text.empty()) return Status::InvalidArgument(src + ": empty (expected a CSV header)");
  if (text.back() != '\n') {
    const int64_t lines = std::count(text.begin(), text.end(), '\n') + 1;
    return Status::InvalidArgument(src + ": line " + std::to_string(lines) +
                                   ": the file ends mid-line (truncated?)");
  }
  Index index(*into);
  enum Col { kWorkload, kTime, kUtil, kMem, kTeam, kGpus, kCols };
  static const char* const kNames[kCols] = {"workload",         "timestamp", "gpu_util_pct",
                                            "gpu_memory_bytes", "team",      "requested_gpus"};
  int col[kCols];
  std::fill(col, col + kCols, -1);
  size_t ncols = 0;
  std::vector<std::string> f;
  int64_t line_no = 0;
  size_t pos = 0;
  bool header = true;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (Trim(line).empty()) continue;
    const std::string at = src + ": line " + std::to_string(line_no) + ": ";
    if (!SplitCsv(line, &f)) return Status::InvalidArgument(at + "a quoted field is not closed");
    if (header) {
      header = false;
      ncols = f.size();
      for (size_t i = 0; i < f.size(); ++i) {
        std::string name = f[i];
        std::transform(name.begin(), name.end(), name.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        int k = 0;
        while (k < kCols && name != kNames[k]) ++k;
        if (k == kCols) {
          return Status::InvalidArgument(at + "unknown column " + Quoted(f[i]) +
                                         " (expected workload, timestamp, gpu_util_pct, "
                                         "gpu_memory_bytes and optionally team, requested_gpus)");
        }
        if (col[k] >= 0) return Status::InvalidArgument(at + "column " + kNames[k] + " twice");
        col[k] = static_cast<int>(i);
      }
      for (int k = 0; k < kTeam; ++k) {
        if (col[k] < 0)
          return Status::InvalidArgument(at + "the header has no " + kNames[k] + " column");
      }
      continue;
    }
    if (f.size() != ncols) {
      return Status::InvalidArgument(at + std::to_string(f.size()) + " fields, the header has " +
                                     std::to_string(ncols));
    }
    const std::string& name = f[static_cast<size_t>(col[kWorkload])];
    if (name.empty()) return Status::InvalidArgument(at + "workload: empty");
    Sample s;
    const std::string& ts = f[static_cast<size_t>(col[kTime])];
    if (!ParseTimestamp(ts, &s.t_ms)) {
      return Status::InvalidArgument(at + "timestamp: " + Quoted(ts) +
                                     " is not epoch seconds or YYYY-MM-DDTHH:MM:SSZ");
    }
    const std::string& util = f[static_cast<size_t>(col[kUtil])];
    if (!util.empty()) {
      int64_t pm = 0;
      if (!ParseDecimal(util, 10, &pm) || pm > 1000) {
        return Status::InvalidArgument(at + "gpu_util_pct: " + Quoted(util) +
                                       " is not a percentage from 0 to 100");
      }
      s.util_pm = static_cast<int32_t>(pm);
    }
    const std::string& mem = f[static_cast<size_t>(col[kMem])];
    if (!mem.empty()) {
      int64_t bytes = 0;
      if (!ParseDecimal(mem, 1, &bytes)) {
        return Status::InvalidArgument(at + "gpu_memory_bytes: " + Quoted(mem) +
                                       " is not a non-negative number of bytes");
      }
      s.mem_mib = (bytes + 1048575) / 1048576;
    }
    Series& w = into->workloads[index.Get(into, name)];
    if (col[kTeam] >= 0 && w.team.empty()) w.team = f[static_cast<size_t>(col[kTeam])];
    if (col[kGpus] >= 0) {
      const std::string& g = f[static_cast<size_t>(col[kGpus])];
      if (!g.empty()) {
        int64_t n = 0;
        if (!ParseDecimal(g, 1, &n) || n < 1 || n > 1024 || g.find_first_of(".eE") != g.npos) {
          return Status::InvalidArgument(at + "requested_gpus: " + Quoted(g) +
                                         " is not a whole number from 1 to 1024");
        }
        w.gpus = static_cast<int>(n);
      }
    }
    w.samples.push_back(s);
    ++into->stats.rows;
  }
  if (header) return Status::InvalidArgument(src + ": no header (expected a CSV header)");
  return Status::Ok();
}

Status ParsePrometheus(std::string_view text, std::string_view source, History* into) {
  using Json = nlohmann::json;
  const std::string src(source);
  Json doc;
  try {
    doc = Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    if (e.byte >= text.size()) {
      return Status::InvalidArgument(src + ": the JSON ends early at byte " +
                                     std::to_string(text.size()) + " (truncated?)");
    }
    return Status::InvalidArgument(src + ": not JSON at byte " + std::to_string(e.byte));
  } catch (const Json::exception& e) {  // a number past a double, found by the fuzzer
    return Status::InvalidArgument(src + ": not JSON the readers take: " + e.what());
  }
  if (!doc.is_object()) return Status::InvalidArgument(src + ": not a Prometheus answer");
  if (doc.contains("status") && doc["status"] != "success") {
    return Status::InvalidArgument(src + ": the query did not succeed (status " +
                                   doc["status"].dump() + ")");
  }
  const Json* data = doc.contains("data") ? &doc["data"] : nullptr;
  if (data == nullptr || !data->is_object() || !data->contains("result") ||
      !(*data)["result"].is_array()) {
    return Status::InvalidArgument(src + ": no data.result array (a range query's answer?)");
  }
  if (data->contains("resultType") && (*data)["resultType"] != "matrix") {
    return Status::InvalidArgument(src + ": data.resultType is " + (*data)["resultType"].dump() +
                                   ", expected matrix (a range query)");
  }
  struct Acc {
    int64_t util_sum = 0, util_n = 0, mem_sum = 0, mem_n = 0;
  };
  std::map<std::string, std::map<int64_t, Acc>> acc;
  std::map<std::string, std::set<std::string>> gpus_of;
  std::map<std::string, std::string> team_of;
  std::vector<std::string> order;
  int64_t i_series = 0;
  for (const Json& r : (*data)["result"]) {
    ++i_series;
    const std::string at = src + ": series " + std::to_string(i_series) + ": ";
    if (!r.is_object() || !r.contains("metric") || !r["metric"].is_object() ||
        !r.contains("values") || !r["values"].is_array()) {
      return Status::InvalidArgument(at + "expected {metric: {...}, values: [[t, \"v\"], ...]}");
    }
    const Json& m = r["metric"];
    auto label = [&](const char* k) -> std::string {
      for (const std::string& key : {"exported_" + std::string(k), std::string(k)}) {
        if (m.contains(key) && m[key].is_string()) return m[key].get<std::string>();
      }
      return "";
    };
    const std::string metric = label("__name__");
    enum { kUtilPct, kUtilRatio, kMem } kind;
    if (metric == "DCGM_FI_DEV_GPU_UTIL") {
      kind = kUtilPct;
    } else if (metric == "DCGM_FI_PROF_GR_ENGINE_ACTIVE") {
      kind = kUtilRatio;
    } else if (metric == "DCGM_FI_DEV_FB_USED") {
      kind = kMem;
    } else if (metric.empty()) {
      return Status::InvalidArgument(at + "no __name__ label: which DCGM metric is it?");
    } else {
      ++into->stats.skipped_series;
      continue;
    }
    const std::string pod = label("pod");
    if (pod.empty()) return Status::InvalidArgument(at + "no pod label");
    std::string ns = label("namespace"), container = label("container");
    const std::string name =
        (ns.empty() ? "" : ns + "/") + pod + (container.empty() ? "" : "/" + container);
    if (!acc.count(name)) order.push_back(name);
    auto& points = acc[name];
    std::string gpu = label("UUID");
    if (gpu.empty()) gpu = label("gpu");
    gpus_of[name].insert(label("Hostname") + "/" + gpu);
    std::string team = label("team");
    if (team.empty()) team = ns;
    if (!team_of.count(name)) team_of[name] = team;
    ++into->stats.series;
    int64_t i_value = 0;
    for (const Json& v : r["values"]) {
      ++i_value;
      const std::string vat =
          at + name + " " + metric + ", value " + std::to_string(i_value) + ": ";
      if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_string()) {
        return Status::InvalidArgument(vat + "expected [timestamp, \"value\"]");
      }
      const double ts = v[0].get<double>();
      if (!(ts >= 0 && ts < 1e13)) return Status::InvalidArgument(vat + "timestamp out of range");
      const int64_t t_ms = static_cast<int64_t>(ts * 1000.0 + 0.5);
      const std::string val = v[1].get<std::string>();
      ++into->stats.rows;
      if (val == "NaN" || val == "+Inf" || val == "-Inf") continue;  // no sample at this time
      int64_t x = 0;
      const int64_t scale = kind == kUtilPct ? 10 : kind == kUtilRatio ? 1000 : 1;
      if (!ParseDecimal(val, scale, &x)) {
        return Status::InvalidArgument(vat + Quoted(val) + " is not a non-negative number");
      }
      Acc& a = points[t_ms];
      if (kind == kMem) {
        if (x > (int64_t{1} << 32)) {
          return Status::InvalidArgument(vat + Quoted(val) + " MiB is past any GPU's memory");
        }
        a.mem_sum += x;
        ++a.mem_n;
      } else {
        if (x > 1000) {
          return Status::InvalidArgument(vat + Quoted(val) + " is past a whole GPU");
        }
        a.util_sum += x;
        ++a.util_n;
      }
    }
  }
  Index index(*into);
  for (const std::string& name : order) {
    Series& w = into->workloads[index.Get(into, name)];
    if (w.team.empty()) w.team = team_of[name];
    w.gpus = std::max<int>(w.gpus, static_cast<int>(gpus_of[name].size()));
    for (const auto& [t, a] : acc[name]) {
      Sample s;
      s.t_ms = t;
      if (a.util_n > 0) s.util_pm = static_cast<int32_t>((a.util_sum + a.util_n - 1) / a.util_n);
      if (a.mem_n > 0) s.mem_mib = a.mem_sum;
      w.samples.push_back(s);
    }
  }
  return Status::Ok();
}

Status ParseUsage(std::string_view text, std::string_view source, History* into) {
  size_t i = 0;
  while (i < text.size() &&
         (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) {
    ++i;
  }
  if (i < text.size() && text[i] == '{') return ParsePrometheus(text, source, into);
  return ParseUsageCsv(text, source, into);
}

}  // namespace tessera::sim::usage
