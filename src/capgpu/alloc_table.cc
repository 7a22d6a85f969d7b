#include "capgpu/alloc_table.h"

#include <stdlib.h>

namespace tessera::capgpu {
namespace {

size_t Hash(uint8_t kind, uint64_t key) {
  uint64_t h = key ^ (static_cast<uint64_t>(kind) << 56);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return static_cast<size_t>(h);
}

}  // namespace

AllocationTable::~AllocationTable() { free(entries_); }

size_t AllocationTable::FindLocked(AllocKind kind, uint64_t key) const {
  if (capacity_ == 0) return capacity_;
  const uint8_t k = static_cast<uint8_t>(kind);
  const size_t mask = capacity_ - 1;
  for (size_t i = Hash(k, key) & mask, probes = 0; probes < capacity_;
       i = (i + 1) & mask, ++probes) {
    const Entry& e = entries_[i];
    if (e.kind == kEmpty) return capacity_;
    if (e.kind == k && e.key == key) return i;
  }
  return capacity_;
}

bool AllocationTable::GrowLocked() {
  // Rehash into a table twice as large when more than half is live, else same size (drops
  // tombstones).
  size_t new_capacity =
      capacity_ == 0 ? 1024 : (live_ * 2 >= capacity_ ? capacity_ * 2 : capacity_);
  auto* fresh = static_cast<Entry*>(calloc(new_capacity, sizeof(Entry)));
  if (fresh == nullptr) return false;
  const size_t mask = new_capacity - 1;
  for (size_t i = 0; i < capacity_; ++i) {
    const Entry& e = entries_[i];
    if (e.kind == kEmpty || e.kind == kTombstone) continue;
    size_t j = Hash(e.kind, e.key) & mask;
    while (fresh[j].kind != kEmpty) j = (j + 1) & mask;
    fresh[j] = e;
  }
  free(entries_);
  entries_ = fresh;
  capacity_ = new_capacity;
  used_ = live_;
  return true;
}

bool AllocationTable::Insert(AllocKind kind, uint64_t key, uint64_t bytes, uint32_t device) {
  pthread_mutex_lock(&mu_);
  bool ok = true;
  size_t i = FindLocked(kind, key);
  if (i != capacity_) {
    entries_[i].bytes = bytes;
    entries_[i].device = device;
  } else {
    if ((used_ + 1) * 4 > capacity_ * 3) ok = GrowLocked();  // keep load under 3/4
    if (ok) {
      const uint8_t k = static_cast<uint8_t>(kind);
      const size_t mask = capacity_ - 1;
      size_t j = Hash(k, key) & mask;
      while (entries_[j].kind != kEmpty && entries_[j].kind != kTombstone) j = (j + 1) & mask;
      if (entries_[j].kind == kEmpty) ++used_;
      entries_[j] = Entry{key, bytes, device, k};
      ++live_;
    }
  }
  pthread_mutex_unlock(&mu_);
  return ok;
}

bool AllocationTable::Remove(AllocKind kind, uint64_t key, uint64_t* bytes, uint32_t* device) {
  pthread_mutex_lock(&mu_);
  size_t i = FindLocked(kind, key);
  bool found = i != capacity_;
  if (found) {
    *bytes = entries_[i].bytes;
    *device = entries_[i].device;
    entries_[i].kind = kTombstone;
    --live_;
  }
  pthread_mutex_unlock(&mu_);
  return found;
}

size_t AllocationTable::size() {
  pthread_mutex_lock(&mu_);
  size_t n = live_;
  pthread_mutex_unlock(&mu_);
  return n;
}

void AllocationTable::ResetAfterFork() {
  mu_ = PTHREAD_MUTEX_INITIALIZER;
  free(entries_);
  entries_ = nullptr;
  capacity_ = live_ = used_ = 0;
}

}  // namespace tessera::capgpu
