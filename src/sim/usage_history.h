// A fleet's GPU telemetry as Tessera reads it for `tessera whatif --usage FILE`: per workload, a
// series of samples (utilization and framebuffer memory used), from one of two formats:
//
// - Prometheus range-query JSON (`/api/v1/query_range`), for the DCGM exporter's series:
//   DCGM_FI_DEV_GPU_UTIL (percent) or DCGM_FI_PROF_GR_ENGINE_ACTIVE (a 0..1 ratio) for
//   utilization, DCGM_FI_DEV_FB_USED (MiB) for memory. The workload is
//   namespace/pod/container (labels `namespace`, `pod`, `container`; the `exported_*` variants,
//   which a scrape of the exporter's own pod gives the workload's labels, come first); its team is
//   the `team` label, else the namespace. A series for several GPUs of one pod (labels
//   `gpu`/`UUID`) counts the pod's GPUs: utilization is their mean, memory their sum.
// - CSV with a header: `workload,timestamp,gpu_util_pct,gpu_memory_bytes[,team][,requested_gpus]`
//   (columns in any order). Timestamps: epoch seconds (a fraction allowed) or
//   YYYY-MM-DDTHH:MM:SS[.fff]Z. Memory in bytes (rounded up to MiB).
//
// Everything is kept in integers: time in ms, utilization in per-mille of a GPU, memory in MiB.
// A row or value that cannot be read is refused with its line (CSV) or series and sample
// (JSON) and the field. A file that ends mid-row (no final newline) or mid-document is refused
// as truncated.
//
// Normalize() then orders each series and reports what it found: samples out of order (the
// series restarted: "resets"), duplicates (the last one kept), gaps (no sample for longer than
// max_gap: the workload is counted as present but idle, holding no memory, over the gap), and
// memory falling to zero between two samples that hold some (a process restart).
//
// Thread-safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera::sim::usage {

struct Sample {
  int64_t t_ms = 0;
  int32_t util_pm = -1;  // per-mille of the workload's GPUs (mean over them); -1: not sampled
  int64_t mem_mib = -1;  // framebuffer used, summed over its GPUs; -1: not sampled
};

struct Series {
  std::string name;  // namespace/pod/container, or the CSV's workload
  std::string team;
  int gpus = 1;  // requested GPUs (CSV column), or distinct GPUs seen (Prometheus)
  std::vector<Sample> samples;
};

struct ParseStats {
  int64_t rows = 0;            // CSV rows or JSON values read
  int64_t series = 0;          // JSON series (CSV: 0)
  int64_t skipped_series = 0;  // JSON series of other metrics (ignored, counted)
};

struct History {
  std::vector<Series> workloads;  // in order of first appearance
  ParseStats stats;
  // Normalize()'s findings.
  int64_t step_ms = 0;           // the sampling interval (the most common one between samples)
  int64_t max_gap_ms = 0;        // gaps past this are counted and treated as idle
  int64_t gaps = 0, gap_ms = 0;  // gaps past max_gap and the time they cover
  int64_t resets = 0;            // samples earlier than the one before (series restarted)
  int64_t duplicates = 0;        // samples at a time already seen (the last one kept)
  int64_t restarts = 0;          // memory falling to zero between two samples that hold some
  int64_t samples = 0;
  int64_t start_ms = 0, end_ms = 0;  // first sample, last sample + step
};

// Parses CSV text (see above). `source` names the file in errors.
Status ParseUsageCsv(std::string_view text, std::string_view source, History* into);
// Parses a Prometheus range-query answer (one or more metrics) into `into`; samples of the same
// workload and time from several series are merged.
Status ParsePrometheus(std::string_view text, std::string_view source, History* into);
// Either, by content: a document starting with '{' is Prometheus JSON, else CSV.
Status ParseUsage(std::string_view text, std::string_view source, History* into);

// Orders and de-duplicates each series, infers the step (or uses `step_ms` > 0), and counts
// gaps (intervals longer than `max_gap_ms`, or 3 steps when 0), resets and restarts.
Status Normalize(History* h, int64_t step_ms = 0, int64_t max_gap_ms = 0);

// What one sample covers: [t, t + min(next - t, max_gap)) (the last one: one step).
struct Span {
  int64_t from_ms = 0, to_ms = 0;
};

// Per workload, from its samples.
struct WorkloadStats {
  int64_t peak_mem_mib = 0;
  int64_t present_ms = 0;         // first sample to last + step
  int64_t active_ms = 0;          // covered by samples with utilization at or above the threshold
  int32_t duty_pm = 0;            // active_ms / present_ms, per-mille (rounded up)
  int32_t mean_util_pm = 0;       // utilization averaged over present_ms (rounded up)
  int64_t used_gpu_milli_ms = 0;  // utilization x time x GPUs (exact)
  int64_t idle_spans = 0;         // maximal runs of idle time between active ones or the ends
  int64_t idle_longest_ms = 0, idle_median_ms = 0;
  std::vector<Span> active;  // active spans, merged
};

// A sample is active when its utilization is at least `active_util_pm` per-mille (a sample with
// no utilization but memory counts as active: nothing says it idled).
WorkloadStats Analyze(const Series& s, int64_t step_ms, int64_t max_gap_ms, int32_t active_util_pm);

// "12.5" -> 12500 with scale 1000: a decimal number as an exact integer of 1/scale units
// (digits past the scale are truncated); false when it is not a plain non-negative decimal
// (an exponent is accepted: "1e3", "2.5E-1").
bool ParseDecimal(std::string_view text, int64_t scale, int64_t* out);

}  // namespace tessera::sim::usage
