// The library's re-entrancy guard. A thread is inside the library while a hook handles a call
// (from past its pass-through checks until it returns), and for the whole life of the library's
// own thread (the swap watcher). A hook entered while its thread is inside is a call the driver,
// or an interposer beneath, makes from inside another one through the exported symbol (seen:
// a driver whose asynchronous copy calls the synchronous one), or one the library's own driver
// calls lead to: it is the outer call's business, so it passes straight to the real function,
// with no gate, charge, credit, tracking or count. So the watcher never waits on its own gate (it
// holds the swap's lock while its copies run), a thread's "inside the driver" mark is never
// cleared under a call still running, and a nested allocation, free or launch is accounted once.
//
// One thread-local counter (initial-exec TLS: a load and a branch on the hooks' capped path).
// Uses no C++ runtime library.
#pragma once

#include <cstdint>

namespace tessera::capgpu {

// Defined in runtime.cc. Balanced by LibraryScope; never written by another thread.
extern __thread uint32_t t_library_depth __attribute__((tls_model("initial-exec")));

// True when the calling thread is already inside the library (see above).
inline bool InsideLibrary() { return __builtin_expect(t_library_depth != 0, 0); }

// Marks the calling thread inside the library for the scope's life; nests.
class LibraryScope {
 public:
  LibraryScope() { ++t_library_depth; }
  ~LibraryScope() { --t_library_depth; }
  LibraryScope(const LibraryScope&) = delete;
  LibraryScope& operator=(const LibraryScope&) = delete;
};

}  // namespace tessera::capgpu
