#include "common/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace tessera {

std::string ReadRest(std::istream& in, bool* failed) {
  std::string out;
  char buf[65536];
  // istream::read turns a throwing read into badbit (no exception mask is set).
  while (in.read(buf, sizeof buf) || in.gcount() > 0)
    out.append(buf, static_cast<size_t>(in.gcount()));
  *failed = in.bad();
  return out;
}

Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::InvalidArgument("cannot read '" + path + "'");
  bool failed = false;
  std::string text = ReadRest(in, &failed);
  if (failed) return Status::InvalidArgument("cannot read '" + path + "'");
  return text;
}

Result<std::string> ReadOrMakeSecret(const std::string& path, const std::string& made) {
  auto failed = [&](const char* what) {
    const int e = errno;
    return Status::FailedPrecondition(
        std::string("cannot ") + what + " '" + path + "': " +
        (e == ELOOP ? "it is a symbolic link, which a secret is never read or written through"
                    : std::strerror(e)));
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    struct stat st {};
    std::string text;
    char buf[4096];
    ssize_t n = 0;
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    // Another account's file (planted where the directory let it) is no secret of ours.
    if (regular && st.st_uid != ::geteuid()) {
      ::close(fd);
      return Status::FailedPrecondition("'" + path + "' belongs to another account (uid " +
                                        std::to_string(st.st_uid) + "): remove it");
    }
    if (regular && (st.st_mode & 077) != 0 && ::fchmod(fd, 0600) != 0) {
      const int e = errno;
      ::close(fd);
      errno = e;
      return failed("make owner-only");
    }
    while (regular && (n = ::read(fd, buf, sizeof buf)) > 0)
      text.append(buf, static_cast<size_t>(n));
    ::close(fd);
    if (!regular) return Status::FailedPrecondition("'" + path + "' is not a regular file");
    if (n < 0) return failed("read");
    const std::string line = text.substr(0, text.find('\n'));
    if (!line.empty()) return line;
    if (::unlink(path.c_str()) != 0) return failed("replace the empty");
  } else if (errno != ENOENT) {
    return failed("read");
  }
  fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return failed("create");
  const std::string text = made + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (::close(fd) != 0 || !ok) return failed("write");
  return made;
}

}  // namespace tessera
