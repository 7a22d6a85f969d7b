// What this process has allocated and charged, so a free can be credited with the right size and
// device: device pointers (cuMemAlloc*), generic allocation handles (cuMemCreate) and arrays.
//
// An open-addressing hash table in libc memory (the preload library uses no C++ runtime).
// Thread-safety: every method is thread-safe (one internal mutex). After fork, the child calls
// ResetAfterFork: its parent's allocations are not its own.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <cstdint>

namespace tessera::capgpu {

enum class AllocKind : uint8_t { kDevicePointer = 1, kMemHandle = 2, kArray = 3 };

class AllocationTable {
 public:
  AllocationTable() = default;
  AllocationTable(const AllocationTable&) = delete;
  AllocationTable& operator=(const AllocationTable&) = delete;
  ~AllocationTable();

  // Records an allocation; replaces an existing record with the same kind and key. False only
  // when host memory for the table cannot be had.
  bool Insert(AllocKind kind, uint64_t key, uint64_t bytes, uint32_t device);
  // Removes a record; false if there was none.
  bool Remove(AllocKind kind, uint64_t key, uint64_t* bytes, uint32_t* device);
  size_t size();
  // Forgets everything without locking (the child of fork: the lock may have been held by a
  // thread that does not exist there).
  void ResetAfterFork();

 private:
  struct Entry {
    uint64_t key;
    uint64_t bytes;
    uint32_t device;
    uint8_t kind;  // 0: empty; 0xff: deleted (tombstone); else AllocKind
  };
  static constexpr uint8_t kEmpty = 0;
  static constexpr uint8_t kTombstone = 0xff;

  bool GrowLocked();
  size_t FindLocked(AllocKind kind, uint64_t key) const;  // index or capacity_

  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  Entry* entries_ = nullptr;  // GUARDED_BY(mu_)
  size_t capacity_ = 0;       // GUARDED_BY(mu_); a power of two
  size_t live_ = 0;           // GUARDED_BY(mu_)
  size_t used_ = 0;           // GUARDED_BY(mu_); live + tombstones
};

}  // namespace tessera::capgpu
