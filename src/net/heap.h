// Handing freed heap memory back to the system after a flood of connections (glibc; elsewhere
// these do nothing but free).
//
// glibc keeps, per thread, up to 7 freed chunks of each size up to 1,032 bytes (its tcache) for
// the thread's next mallocs. To the heap those chunks are in use: malloc_trim returns no page one
// of them lies on. After a flood, the event loops' caches hold chunks of the connections' memory
// scattered over the heap, and 1-2 MB of pages stayed resident (conn_flood_bench: 1.11-1.13 of
// the RSS before, against 1.00 with the cache off). No glibc call empties another thread's
// cache, nor its own; a thread empties it by taking every chunk out of it (TakeThreadCache),
// and the chunks go back to the heap through a thread that frees them and exits at once: glibc
// empties an exiting thread's cache into the heap (FreeAndTrim).
#pragma once

#include <vector>

namespace tessera::net {

// Empties the calling thread's malloc cache: the chunks it held (and, for sizes it held fewer of,
// chunks from the heap), for FreeAndTrim. About a thousand mallocs; some 300 KB.
std::vector<void*> TakeThreadCache();

// Frees `chunks` on a new thread that then ends (its cache goes back to the heap with it) and
// returns the heap's free pages to the system (malloc_trim).
void FreeAndTrim(std::vector<void*> chunks);

}  // namespace tessera::net
