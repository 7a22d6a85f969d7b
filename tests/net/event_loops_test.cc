// The HTTP server's event loops, in-process on loopback ports: each I/O thread runs its own loop
// and a connection stays on one, so a connection's handlers always run on one thread; a handler
// that waits (on the worker pool) stalls no loop; answers given later from another thread reach
// the right connection in order.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "net/http_server.h"

namespace tessera::net {
namespace {

std::string ThreadName() {
  static std::mutex mu;
  static std::map<std::thread::id, int> ids;
  std::lock_guard<std::mutex> l(mu);
  auto [it, fresh] = ids.emplace(std::this_thread::get_id(), static_cast<int>(ids.size()));
  return std::to_string(it->second);
}

class EventLoopsTest : public ::testing::Test {
 protected:
  void Start(int io_threads, int workers) {
    HttpServerOptions o;
    o.io_threads = io_threads;
    o.workers = workers;
    server_ = std::make_unique<HttpServer>(o);
    // Answers at once, with the thread that ran it.
    server_->RouteAsync("GET", "/thread", [](const HttpRequest&, HttpReply reply) {
      reply(HttpResponse{200, "text/plain", ThreadName(), {}});
    });
    // Answers later from another thread, echoing its argument.
    server_->RouteAsync("GET", "/later/{n}", [this](const HttpRequest& req, HttpReply reply) {
      std::lock_guard<std::mutex> l(later_mu_);
      later_.emplace_back(req.params[0], std::move(reply));
      later_cv_.notify_one();
    });
    // Waits until released (a handler that waits for the store, on the worker pool).
    server_->Route("GET", "/blocked", [this](const HttpRequest&, HttpResponse& res) {
      std::unique_lock<std::mutex> l(block_mu_);
      ++blocked_;
      block_cv_.notify_all();
      block_cv_.wait(l, [this] { return released_; });
      res.body = "released";
    });
    auto port = server_->Bind("127.0.0.1", 0);
    ASSERT_TRUE(port.ok());
    port_ = *port;
    thread_ = std::thread([this] { server_->Run(); });
    answerer_ = std::thread([this] {
      std::unique_lock<std::mutex> l(later_mu_);
      while (true) {
        later_cv_.wait(l, [this] { return stop_answerer_ || !later_.empty(); });
        if (later_.empty()) return;
        auto [n, reply] = std::move(later_.front());
        later_.erase(later_.begin());
        l.unlock();
        reply(HttpResponse{200, "text/plain", "answer " + n, {}});
        l.lock();
      }
    });
  }
  void Release() {
    std::lock_guard<std::mutex> l(block_mu_);
    released_ = true;
    block_cv_.notify_all();
  }
  void TearDown() override {
    Release();
    {
      std::lock_guard<std::mutex> l(later_mu_);
      stop_answerer_ = true;
      later_cv_.notify_all();
    }
    if (answerer_.joinable()) answerer_.join();
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
  }

  int port_ = 0;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_, answerer_;
  std::mutex later_mu_;
  std::condition_variable later_cv_;
  std::vector<std::pair<std::string, HttpReply>> later_;
  bool stop_answerer_ = false;
  std::mutex block_mu_;
  std::condition_variable block_cv_;
  int blocked_ = 0;
  bool released_ = false;
};

TEST_F(EventLoopsTest, AConnectionStaysOnOneThreadAndConnectionsAreSpreadOverTheLoops) {
  Start(/*io_threads=*/3, /*workers=*/1);
  // Six connections held open together: a new one goes to a loop with the fewest, so each of
  // the three loops gets two.
  std::vector<std::unique_ptr<httplib::Client>> clients;
  std::map<std::string, int> per_thread;
  for (int c = 0; c < 6; ++c) {
    clients.push_back(std::make_unique<httplib::Client>("127.0.0.1", port_));
    clients.back()->set_keep_alive(true);
    std::set<std::string> on_this_connection;
    for (int i = 0; i < 5; ++i) {
      auto r = clients.back()->Get("/thread");
      ASSERT_TRUE(r) << httplib::to_string(r.error());
      ASSERT_EQ(r->status, 200);
      on_this_connection.insert(r->body);
    }
    ASSERT_EQ(on_this_connection.size(), 1u) << "connection " << c << " moved between threads";
    ++per_thread[*on_this_connection.begin()];
  }
  EXPECT_EQ(per_thread.size(), 3u);
  for (const auto& [thread, n] : per_thread) EXPECT_EQ(n, 2) << "loop thread " << thread;
}

TEST_F(EventLoopsTest, AWaitingHandlerStallsNoLoop) {
  Start(/*io_threads=*/1, /*workers=*/2);  // one loop: were it stalled, nothing would be answered
  std::thread waiting([this] {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(20, 0);
    auto r = client.Get("/blocked");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, "released");
  });
  {
    std::unique_lock<std::mutex> l(block_mu_);
    ASSERT_TRUE(block_cv_.wait_for(l, std::chrono::seconds(10), [this] { return blocked_ == 1; }));
  }
  for (int c = 0; c < 8; ++c) {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(5, 0);
    auto r = client.Get("/thread");
    ASSERT_TRUE(r) << "connection " << c << " was not answered while a handler waited";
    EXPECT_EQ(r->status, 200);
  }
  Release();
  waiting.join();
}

TEST_F(EventLoopsTest, LaterAnswersFromAnotherThreadReachTheirConnectionsInOrder) {
  Start(/*io_threads=*/2, /*workers=*/1);
  std::atomic<int> wrong{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([this, c, &wrong] {
      httplib::Client client("127.0.0.1", port_);
      client.set_keep_alive(true);
      client.set_read_timeout(10, 0);
      for (int i = 0; i < 25; ++i) {
        const std::string n = std::to_string(c * 1000 + i);
        auto r = client.Get("/later/" + n);
        if (!r || r->status != 200 || r->body != "answer " + n) ++wrong;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace tessera::net
