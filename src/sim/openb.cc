#include "sim/openb.h"

#include <fstream>
#include <sstream>

#include "model/quantity.h"

namespace tessera::sim {
namespace {

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string_view> SplitCsv(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      out.push_back(line.substr(start));
      break;
    }
    out.push_back(line.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// Iterates data rows of a CSV with a required header prefix.
class CsvReader {
 public:
  CsvReader(const std::string& text, std::string path) : text_(text), path_(std::move(path)) {}

  // Reads the header; it must start with `required` columns in that order.
  Status Header(const std::vector<std::string>& required, size_t* columns) {
    std::string_view line;
    if (!Next(&line)) return Status::InvalidArgument(path_ + ": empty file, expected a header");
    header_ = SplitCsv(line);
    for (size_t i = 0; i < required.size(); ++i) {
      if (i >= header_.size() || header_[i] != required[i]) {
        return Status::InvalidArgument(path_ + ":1: column " + std::to_string(i + 1) +
                                       " of the header should be '" + required[i] + "'");
      }
    }
    *columns = header_.size();
    return Status::Ok();
  }

  bool Next(std::string_view* line) {
    while (pos_ < text_.size()) {
      size_t nl = text_.find('\n', pos_);
      size_t end = nl == std::string::npos ? text_.size() : nl;
      std::string_view l(text_.data() + pos_, end - pos_);
      pos_ = nl == std::string::npos ? text_.size() : nl + 1;
      ++line_no_;
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      if (l.empty()) continue;
      *line = l;
      return true;
    }
    return false;
  }

  Status Error(size_t column, const std::string& what) const {
    std::string col = column < header_.size() ? std::string(header_[column]) : "?";
    return Status::InvalidArgument(path_ + ":" + std::to_string(line_no_) + ": column " +
                                   std::to_string(column + 1) + " (" + col + "): " + what);
  }
  Status RowError(const std::string& what) const {
    return Status::InvalidArgument(path_ + ":" + std::to_string(line_no_) + ": " + what);
  }

  // The next data row split into exactly the header's number of columns. False at the end; an
  // error names the line when a row is short (truncated) or long.
  Result<bool> NextRow(std::vector<std::string_view>* f) {
    std::string_view line;
    if (!Next(&line)) return false;
    *f = SplitCsv(line);
    if (f->size() != header_.size()) {
      return RowError("expected " + std::to_string(header_.size()) + " columns, found " +
                      std::to_string(f->size()) +
                      (f->size() < header_.size() ? " (truncated row?)" : ""));
    }
    return true;
  }

  // Columns first..last of a row as non-negative integers.
  Status Ints(const std::vector<std::string_view>& f, size_t first, size_t last,
              std::vector<int64_t>* out) const {
    out->clear();
    for (size_t c = first; c <= last; ++c) {
      Result<int64_t> v = Int(f, c);
      if (!v.ok()) return v.status();
      out->push_back(*v);
    }
    return Status::Ok();
  }

  Result<int64_t> Int(const std::vector<std::string_view>& f, size_t column) const {
    Result<int64_t> v = ParseNonNegativeInt(f[column]);
    if (!v.ok()) {
      return Error(column, "'" + std::string(f[column]) + "' is not a non-negative integer");
    }
    return v;
  }

 private:
  const std::string& text_;
  std::string path_;
  std::vector<std::string_view> header_;
  size_t pos_ = 0;
  int line_no_ = 0;
};

// The rows of a CSV whose header starts with `required`, a row each data line: its name from the
// first column (never empty), the rest from `parse_row(csv, fields, columns, &row)`. `what`
// names the rows in errors ("node", "pod"); a file without any is an error.
template <typename Row, typename ParseRow>
Result<std::vector<Row>> ParseNamedRows(const std::string& text, const std::string& path,
                                        const std::vector<std::string>& required,
                                        const std::string& what, ParseRow parse_row) {
  CsvReader csv(text, path);
  size_t columns = 0;
  Status st = csv.Header(required, &columns);
  if (!st.ok()) return st;
  std::vector<Row> rows;
  std::vector<std::string_view> f;
  while (true) {
    Result<bool> more = csv.NextRow(&f);
    if (!more.ok()) return more.status();
    if (!*more) break;
    Row row;
    row.name = std::string(f[0]);
    if (row.name.empty()) return csv.Error(0, "empty " + what + " name");
    if (Status s = parse_row(csv, f, columns, &row); !s.ok()) return s;
    rows.push_back(std::move(row));
  }
  if (rows.empty()) return Status::InvalidArgument(path + ": no " + what + " rows");
  return rows;
}

}  // namespace

Result<std::vector<Node>> ParseOpenbNodes(const std::string& text, const std::string& path) {
  std::vector<int64_t> v;
  return ParseNamedRows<Node>(text, path, {"sn", "cpu_milli", "memory_mib", "gpu", "model"}, "node",
                              [&v](const CsvReader& csv, const std::vector<std::string_view>& f,
                                   size_t /*columns*/, Node* n) -> Status {
                                if (Status s = csv.Ints(f, 1, 3, &v); !s.ok()) return s;
                                const int64_t *cpu = &v[0], *mem = &v[1], *gpus = &v[2];
                                if (*gpus > 64) return csv.Error(3, "at most 64 GPUs per node");
                                if (*gpus > 0 && f[4].empty())
                                  return csv.Error(4, "a node with GPUs needs a model");
                                n->cpu_milli = *cpu;
                                n->memory_mib = *mem;
                                for (int i = 0; i < *gpus; ++i)
                                  n->devices.push_back(Device{i, std::string(f[4]), 0});
                                return Status::Ok();
                              });
}

Result<std::vector<TracePod>> ParseOpenbPods(const std::string& text, const std::string& path) {
  std::vector<int64_t> v;
  return ParseNamedRows<TracePod>(
      text, path, {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}, "pod",
      [&v](const CsvReader& csv, const std::vector<std::string_view>& f, size_t columns,
           TracePod* p) -> Status {
        if (Status s = csv.Ints(f, 1, 4, &v); !s.ok()) return s;
        const int64_t *cpu = &v[0], *mem = &v[1], *num = &v[2], *milli = &v[3];
        if (*num > 64) return csv.Error(3, "at most 64 GPUs per pod");
        if (*milli > 1000) return csv.Error(4, "gpu_milli above 1000");
        if (*num == 0 && *milli != 0) return csv.Error(4, "gpu_milli without num_gpu");
        if (*num > 0 && *milli == 0) return csv.Error(4, "num_gpu > 0 needs gpu_milli > 0");
        if (*num > 1 && *milli != 1000)
          return csv.Error(4, "multi-GPU pods must take whole GPUs (1000)");
        p->cpu_milli = *cpu;
        p->memory_mib = *mem;
        p->num_gpu = static_cast<int>(*num);
        p->gpu_milli = *milli;
        if (columns > 5 && !f[5].empty()) {
          std::string_view spec = f[5];
          size_t start = 0;
          while (true) {
            size_t bar = spec.find('|', start);
            std::string_view m =
                spec.substr(start, bar == std::string_view::npos ? spec.npos : bar - start);
            if (m.empty()) {
              return csv.Error(5, "empty model in gpu_spec '" + std::string(spec) + "'");
            }
            p->gpu_spec.emplace_back(m);
            if (bar == std::string_view::npos) break;
            start = bar + 1;
          }
        }
        if (columns > 9) {
          for (auto [col, field] :
               {std::pair<size_t, int64_t*>{8, &p->creation_time}, {9, &p->deletion_time}}) {
            if (f[col].empty()) continue;
            auto t = csv.Int(f, col);
            if (!t.ok()) return t.status();
            *field = *t;
          }
        }
        return Status::Ok();
      });
}

Result<std::vector<Node>> ReadOpenbNodes(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseOpenbNodes(*text, path);
}

Result<std::vector<TracePod>> ReadOpenbPods(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseOpenbPods(*text, path);
}

}  // namespace tessera::sim
