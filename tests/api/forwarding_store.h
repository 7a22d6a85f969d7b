// A store that forwards every call to a real one: the base of the test stores that count, slow
// down or fail some calls (override those, call ForwardingStore's for the rest).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "store/store.h"

namespace tessera::testing {

class ForwardingStore : public store::Store {
 public:
  explicit ForwardingStore(std::unique_ptr<store::Store> inner) : inner_(std::move(inner)) {}

  Status Commit(const std::vector<store::Event>& events, const std::vector<store::JobRecord>& jobs,
                std::vector<int64_t>* seqs) override {
    return inner_->Commit(events, jobs, seqs);
  }
  Result<std::vector<store::JobRecord>> LoadJobs() override { return inner_->LoadJobs(); }
  Result<std::vector<store::JobRecord>> LoadLiveJobs() override { return inner_->LoadLiveJobs(); }
  Result<std::vector<store::JobRecord>> ListJobs(const std::string& state, int limit) override {
    return inner_->ListJobs(state, limit);
  }
  Result<std::vector<store::JobRecord>> ListEndedJobs(const std::string& state,
                                                      int limit) override {
    return inner_->ListEndedJobs(state, limit);
  }
  Result<int64_t> MaxJobNumber() override { return inner_->MaxJobNumber(); }
  bool Tidy() override { return inner_->Tidy(); }
  Result<std::optional<store::JobRecord>> FindByIdempotencyKey(const std::string& key,
                                                               int64_t since_ms) override {
    return inner_->FindByIdempotencyKey(key, since_ms);
  }
  Result<int64_t> Prune(int64_t before_ms) override { return inner_->Prune(before_ms); }
  Result<int64_t> PruneEventsOfKind(const std::string& kind, int64_t before_ms) override {
    return inner_->PruneEventsOfKind(kind, before_ms);
  }
  Result<std::optional<store::JobRecord>> GetJob(const std::string& id) override {
    return inner_->GetJob(id);
  }
  Result<std::vector<store::Event>> ListEvents(int64_t after, int limit,
                                               const store::EventFilter& f) override {
    return inner_->ListEvents(after, limit, f);
  }
  Result<int64_t> LastSeq() override { return inner_->LastSeq(); }
  Status PutSetting(const std::string& k, const std::string& v) override {
    return inner_->PutSetting(k, v);
  }
  Result<std::optional<std::string>> GetSetting(const std::string& k) override {
    return inner_->GetSetting(k);
  }
  Result<std::vector<std::pair<std::string, std::string>>> ListSettings(
      const std::string& p) override {
    return inner_->ListSettings(p);
  }
  Status PutSample(int r, const Sample& s) override { return inner_->PutSample(r, s); }
  Result<std::vector<Sample>> ListSamples(int r, int64_t since, int64_t until) override {
    return inner_->ListSamples(r, since, until);
  }
  Result<int64_t> PruneSamples(int r, int64_t before) override {
    return inner_->PruneSamples(r, before);
  }
  Result<int> SchemaVersion() override { return inner_->SchemaVersion(); }
  std::string Describe() const override { return inner_->Describe(); }
  Result<std::optional<Leadership>> TryLead(const std::string& holder) override {
    return inner_->TryLead(holder);
  }
  Result<Leadership> Leader() override { return inner_->Leader(); }
  Status CheckLease() override { return inner_->CheckLease(); }

 private:
  std::unique_ptr<store::Store> inner_;
};

}  // namespace tessera::testing
