#include "common/read_file.h"

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

}  // namespace tessera
