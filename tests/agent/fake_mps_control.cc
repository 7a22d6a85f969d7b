// A stand-in nvidia-cuda-mps-control for the agent's tests (there is no GPU here). It follows the
// interface NVIDIA's "Multi-Process Service" guide documents (Appendix: Tools and Interface
// Reference, nvidia-cuda-mps-control and its environment variables):
//   nvidia-cuda-mps-control -d   starts the control daemon in the background (it writes
//                                nvidia-cuda-mps-control.pid in CUDA_MPS_PIPE_DIRECTORY, default
//                                /tmp/nvidia-mps, and logs to control.log in
//                                CUDA_MPS_LOG_DIRECTORY); a second one while it runs fails
//   nvidia-cuda-mps-control      reads commands, one a line, on its standard input, sends each to
//                                the daemon and prints its answer; it fails without a daemon
// Commands: set_default_active_thread_percentage P (1-100), get_default_active_thread_percentage
// (answers "P.0", 100.0 at first), set_default_device_pinned_mem_limit DEV VALUE,
// get_default_device_pinned_mem_limit DEV, get_server_list (no servers: no CUDA client here),
// quit. The daemon's control.log has one line per command ("Control: <command>"), and
// "Starting control daemon for devices <CUDA_VISIBLE_DEVICES>". The daemon talks to its clients
// over a UNIX socket, PIPE_DIRECTORY/control (the real one's pipes are its own business).
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

namespace {

std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : fallback;
}
std::string PipeDir() { return Env("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"); }
std::string LogDir() { return Env("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"); }
std::string PidFile() { return PipeDir() + "/nvidia-cuda-mps-control.pid"; }

sockaddr_un Address() {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s/control", PipeDir().c_str());
  return a;
}

void Log(const std::string& line) {
  std::ofstream(LogDir() + "/control.log", std::ios::app) << line << "\n";
}

bool Alive() {
  std::ifstream in(PidFile());
  long pid = 0;
  return (in >> pid) && pid > 1 && kill(static_cast<pid_t>(pid), 0) == 0;
}

// One command: its exit code and answer.
std::pair<int, std::string> Handle(const std::string& line, int* percent,
                                   std::map<std::string, std::string>* limits, bool* quit) {
  std::istringstream in(line);
  std::string cmd, a, b;
  in >> cmd >> a >> b;
  if (cmd == "set_default_active_thread_percentage") {
    char* end = nullptr;
    const long p = std::strtol(a.c_str(), &end, 10);
    if (a.empty() || *end != '\0' || p < 1 || p > 100) return {1, "Invalid percentage " + a};
    *percent = static_cast<int>(p);
    return {0, std::to_string(p) + ".0"};
  }
  if (cmd == "get_default_active_thread_percentage") return {0, std::to_string(*percent) + ".0"};
  if (cmd == "set_default_device_pinned_mem_limit") {
    if (a.empty() || b.empty()) return {1, "Usage: set_default_device_pinned_mem_limit DEV VALUE"};
    (*limits)[a] = b;
    return {0, ""};
  }
  if (cmd == "get_default_device_pinned_mem_limit") {
    auto it = limits->find(a);
    return {0, it == limits->end() ? "" : it->second};
  }
  if (cmd == "get_server_list") return {0, ""};
  if (cmd == "quit") {
    *quit = true;
    return {0, ""};
  }
  return {1, "Unrecognized command: " + cmd};
}

int Daemon() {
  if (Alive()) {
    std::cerr << "An instance of this daemon is already running\n";
    return 1;
  }
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid > 0) return 0;  // the caller goes on; the daemon runs in the background
  setsid();
  const int null = open("/dev/null", O_RDWR);
  dup2(null, 0), dup2(null, 1), dup2(null, 2);
  const int s = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr = Address();
  unlink(addr.sun_path);
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(s, 16) != 0)
    _exit(1);
  Log("Starting control daemon for devices " + Env("CUDA_VISIBLE_DEVICES", "(all)"));
  std::ofstream(PidFile()) << getpid() << "\n";
  int percent = 100;
  std::map<std::string, std::string> limits;
  for (bool quit = false; !quit;) {
    const int c = accept(s, nullptr, nullptr);
    if (c < 0) continue;
    std::string line;
    char ch = 0;
    while (read(c, &ch, 1) == 1 && ch != '\n') line += ch;
    Log("Control: " + line);
    auto [code, answer] = Handle(line, &percent, &limits, &quit);
    const std::string reply = std::to_string(code) + "\n" + answer;
    (void)!write(c, reply.data(), reply.size());
    close(c);
  }
  Log("Control daemon exiting");
  unlink(PidFile().c_str());
  unlink(addr.sun_path);
  _exit(0);
}

int Client() {
  int last = 0;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    const int s = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr = Address();
    if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      std::cerr << "Cannot find MPS control daemon process\n";
      return 1;
    }
    line += "\n";
    (void)!write(s, line.data(), line.size());
    std::string reply;
    char buf[256];
    for (ssize_t n; (n = read(s, buf, sizeof buf)) > 0;) reply.append(buf, static_cast<size_t>(n));
    close(s);
    const size_t nl = reply.find('\n');
    last = std::atoi(reply.substr(0, nl).c_str());
    const std::string answer = nl == std::string::npos ? "" : reply.substr(nl + 1);
    if (!answer.empty()) std::cout << answer << "\n";
  }
  return last;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "-d") == 0) return Daemon();
  if (argc > 1) {
    std::cerr << "Usage: nvidia-cuda-mps-control [-d]\n";
    return 1;
  }
  return Client();
}
