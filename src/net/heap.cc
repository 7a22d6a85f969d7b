#include "net/heap.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdlib>
#include <system_error>
#include <thread>
#include <utility>

namespace tessera::net {
namespace {

// glibc's cache has a bin per 16 bytes of chunk size from 32 to 1,040 (requests up to 1,032
// bytes), 7 chunks each unless the glibc.malloc.tcache_count tunable says more: taking 16 of each
// size empties it at up to 16.
constexpr int kCacheBins = 64;
constexpr int kTakenPerBin = 16;

}  // namespace

std::vector<void*> TakeThreadCache() {
  std::vector<void*> chunks;
#if defined(__GLIBC__)
  chunks.reserve(kCacheBins * kTakenPerBin);
  for (int bin = 0; bin < kCacheBins; ++bin) {
    const size_t request = 16 * static_cast<size_t>(bin) + 24;  // a chunk of 32 + 16 * bin bytes
    for (int i = 0; i < kTakenPerBin; ++i) {
      if (void* p = std::malloc(request); p != nullptr) chunks.push_back(p);
    }
  }
#endif
  return chunks;
}

void FreeAndTrim(std::vector<void*> chunks) {
  // Freed here, they would fill this thread's cache again; here all the same when no thread can
  // be started (out of memory or threads: never an exception on the server's loop).
  auto free_all = [&chunks] {
    for (void* p : chunks) std::free(p);
    chunks.clear();
  };
  try {
    std::thread(free_all).join();
  } catch (const std::system_error&) {
    free_all();
  }
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace tessera::net
