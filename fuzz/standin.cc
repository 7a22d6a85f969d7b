// A stand-in for the batch schedulers' commands (squeue, scontrol, sacct, qstat), for
// backend_poll_fuzz: prints the file $TESSERA_FUZZ_STANDIN_DIR/<its own name> (whatever the
// arguments) and exits 0, or 1 when that file is missing. Built without sanitizers or libFuzzer:
// it runs once per command of every input, and only copies bytes.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  const char* dir = std::getenv("TESSERA_FUZZ_STANDIN_DIR");
  if (argc < 1 || dir == nullptr) return 2;
  const char* slash = std::strrchr(argv[0], '/');
  const std::string path = std::string(dir) + "/" + (slash ? slash + 1 : argv[0]);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 1;
  char buf[1 << 16];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) {
    for (ssize_t off = 0; off < n;) {
      const ssize_t w = write(1, buf + off, static_cast<size_t>(n - off));
      if (w <= 0) return 3;
      off += w;
    }
  }
  close(fd);
  return 0;
}
