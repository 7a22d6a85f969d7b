// Reading a whole file without exceptions: a read that fails after a successful open (a
// directory: EISDIR; a /proc file of a process gone meanwhile: ESRCH) is an error to name, not an
// exception out of the caller, as an istreambuf_iterator would let through.
#pragma once

#include <istream>
#include <string>

#include "common/status.h"

namespace tessera {

// What is left of an open stream, read to its end; *failed true when a read failed on the way
// (what was read before is returned).
std::string ReadRest(std::istream& in, bool* failed);

// The whole of the file at `path`; an error naming it when it cannot be opened or read.
Result<std::string> ReadWholeFile(const std::string& path);

}  // namespace tessera
