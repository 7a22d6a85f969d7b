// The history's chores (api/housekeeping.h): utilization samples and their roll-up, retention,
// fair-share history.
#include "api/housekeeping.h"

#include <algorithm>
#include <map>
#include <vector>

#include "api/views.h"

namespace tessera::api {

Housekeeping::Housekeeping(LedgerReads& reads, store::Store& history, const EngineConfig& config)
    : reads_(reads), history_(history), config_(config) {}

Status Housekeeping::Tick() {
  if (Status st = HistoryTick(); !st.ok()) return st;
  if (Status st = RetentionTick(); !st.ok()) return st;
  return SaveFairShare(false);
}

// Fair-share history survives restarts: saved every minute (and when asked), outside the
// engine's mutex, as {"as_of": s, "groups": {name: [gpu, gpu_memory, cpu, memory]}}.
Status Housekeeping::SaveFairShare(bool now) {
  Json saved;
  reads_.Read([&](const ReadModel& m) {
    if (!now && reads_.NowMs() - done_.fair_share_saved_ms < kFairShareSaveMs) return;
    done_.fair_share_saved_ms = reads_.NowMs();
    int64_t as_of = 0;
    Json groups = Json::object();
    for (const auto& h : m.quota.FairShare(&as_of))
      groups[h.group] = {h.decayed[0], h.decayed[1], h.decayed[2], h.decayed[3]};
    if (as_of < 0) return;  // no cycle yet: nothing to say
    saved = {{"as_of", as_of}, {"groups", groups}};
  });
  if (saved.is_null()) return Status::Ok();
  return history_.PutSetting(kFairShareKey, saved.dump());
}

Status Housekeeping::RestoreFairShare(quota::QuotaEngine& qe, int64_t now_s) {
  auto text = history_.GetSetting(kFairShareKey);
  if (!text.ok()) return text.status();
  if (!text->has_value()) return Status::Ok();
  const Json j = Json::parse(**text, nullptr, false);
  if (!j.is_object() || !j.contains("as_of") || !j["as_of"].is_number_integer() ||
      !j.contains("groups") || !j["groups"].is_object()) {
    return Status::Ok();  // unreadable history: start afresh rather than refuse to start
  }
  std::vector<quota::QuotaEngine::FairShareHistory> history;
  for (const auto& [name, v] : j["groups"].items()) {
    quota::QuotaEngine::FairShareHistory h;
    h.group = name;
    for (size_t r = 0; r < 4 && v.is_array() && r < v.size(); ++r)
      h.decayed[r] = v[r].is_number() ? v[r].get<double>() : 0.0;
    history.push_back(h);
  }
  qe.RestoreFairShare(history, j["as_of"].get<int64_t>(), now_s);
  return Status::Ok();
}

Status Housekeeping::RetentionTick() {
  // Hourly, outside the engine's mutex: the store deletes what ended before the cut (a job in
  // memory is live or ended recently, so nothing memory holds is older than a day of it).
  const int64_t now = reads_.NowMs();
  const bool audit = config_.history.auth_failed_retention_ms > 0;
  if ((config_.history.retention_ms <= 0 && !audit) || now - done_.pruned_ms < kPruneEveryMs)
    return Status::Ok();
  done_.pruned_ms = now;
  if (audit) {
    auto gone =
        history_.PruneEventsOfKind("auth.failed", now - config_.history.auth_failed_retention_ms);
    if (!gone.ok()) return gone.status();
  }
  if (config_.history.retention_ms <= 0) return Status::Ok();
  auto rows = history_.Prune(now - config_.history.retention_ms);
  return rows.ok() ? Status::Ok() : rows.status();
}

Status Housekeeping::HistoryTick() {
  const int64_t now = reads_.NowMs();
  const int fine_s =
      static_cast<int>(std::max<int64_t>(1, config_.history.utilization_sample_ms / 1000));
  std::string sample;
  Status broken = Status::Ok();
  reads_.Read([&](const ReadModel& m) {
    broken = m.broken;
    if (!broken.ok()) return;
    if (done_.sampled_ms != 0 && now - done_.sampled_ms < config_.history.utilization_sample_ms)
      return;
    done_.sampled_ms = now;
    sample = UtilizationSample(m);
  });
  if (!broken.ok()) return broken;
  if (sample.empty()) return Status::Ok();
  if (Status st = history_.PutSample(fine_s, {now, sample}); !st.ok()) return st;
  // Roll every complete 5-minute bucket since the last one rolled (found in the store after a
  // restart) into its average; fine samples older than utilization_fine_keep go.
  const int64_t done = now / kCoarseSampleMs * kCoarseSampleMs;  // buckets before this are complete
  if (done > done_.rolled_up_ms) {
    int64_t from =
        std::max<int64_t>(done_.rolled_up_ms, done - config_.history.utilization_fine_keep_ms);
    if (done_.rolled_up_ms == 0) {
      auto coarse = history_.ListSamples(kCoarseSampleMs / 1000,
                                         done - config_.history.utilization_fine_keep_ms, done);
      if (!coarse.ok()) return coarse.status();
      from = coarse->empty() ? done - config_.history.utilization_fine_keep_ms
                             : coarse->back().time_ms + kCoarseSampleMs;
    }
    from = from / kCoarseSampleMs * kCoarseSampleMs;
    auto fine = history_.ListSamples(fine_s, from, done);
    if (!fine.ok()) return fine.status();
    std::map<int64_t, std::vector<Json>> buckets;
    for (const auto& f : *fine) {
      Json j = Json::parse(f.data, nullptr, false);
      if (j.is_object())
        buckets[f.time_ms / kCoarseSampleMs * kCoarseSampleMs].push_back(std::move(j));
    }
    for (const auto& [t, samples] : buckets) {
      if (Status st =
              history_.PutSample(kCoarseSampleMs / 1000, {t, AverageSamples(samples).dump()});
          !st.ok())
        return st;
    }
    done_.rolled_up_ms = done;
    if (auto p = history_.PruneSamples(fine_s, now - config_.history.utilization_fine_keep_ms);
        !p.ok())
      return p.status();
    if (auto p = history_.PruneSamples(kCoarseSampleMs / 1000,
                                       now - config_.history.utilization_keep_ms);
        !p.ok())
      return p.status();
  }
  return Status::Ok();
}

}  // namespace tessera::api
