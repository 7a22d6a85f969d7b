// A TCP proxy for fault tests: forwards 127.0.0.1:port() to 127.0.0.1:target, and can cut
// everything (open connections are shut down, new ones closed at once) and heal again: a network
// partition between one client (an agent) and a server, with both processes running on.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace tessera::testing {

class TcpProxy {
 public:
  explicit TcpProxy(int target) : target_(target) {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    ::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(listen_, 64);
    socklen_t len = sizeof a;
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~TcpProxy() {
    stop_.store(true);
    Cut();
    ::shutdown(listen_, SHUT_RDWR);
    acceptor_.join();
    for (std::thread& t : pumps_) t.join();
    ::close(listen_);
  }
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }
  // Every open connection is shut down, and new ones are closed as soon as they are accepted.
  void Cut() {
    cut_.store(true);
    std::lock_guard<std::mutex> l(mu_);
    for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
  }
  void Heal() { cut_.store(false); }

 private:
  void Accept() {
    while (!stop_.load()) {
      pollfd p{listen_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int client = ::accept(listen_, nullptr, nullptr);
      if (client < 0) continue;
      if (cut_.load()) {
        ::close(client);
        continue;
      }
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(target_));
      if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(server);
        ::close(client);
        continue;
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        open_.insert(client);
        open_.insert(server);
      }
      pumps_.emplace_back([this, client, server] { Pump(client, server); });
    }
  }
  void Pump(int a, int b) {
    char buf[16384];
    while (!stop_.load() && !cut_.load()) {
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (::poll(p, 2, 100) <= 0) continue;
      bool done = false;
      for (int i = 0; i < 2 && !done; ++i) {
        if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t n = ::read(p[i].fd, buf, sizeof buf);
        if (n <= 0) {
          done = true;
          break;
        }
        const int to = i == 0 ? b : a;
        for (ssize_t off = 0; off < n;) {
          const ssize_t w = ::send(to, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
          if (w <= 0) {
            done = true;
            break;
          }
          off += w;
        }
      }
      if (done) break;
    }
    std::lock_guard<std::mutex> l(mu_);
    open_.erase(a);
    open_.erase(b);
    ::close(a);
    ::close(b);
  }

  int target_;
  int listen_ = -1;
  int port_ = 0;
  std::atomic<bool> cut_{false};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::set<int> open_;
  std::thread acceptor_;
  std::vector<std::thread> pumps_;
};

}  // namespace tessera::testing
