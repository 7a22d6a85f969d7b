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

// The first line of the secret file at `path` (a token), or `made` written there as a new file
// where there is none (or it is empty). Never through a symbolic link (an error naming it); a
// new file is owner-only from its creation (O_EXCL, 0600: made with the umask's mode and
// chmod-ed after, another account that opened it in between kept reading it), and one that
// exists is tightened to 0600.
Result<std::string> ReadOrMakeSecret(const std::string& path, const std::string& made);

}  // namespace tessera
