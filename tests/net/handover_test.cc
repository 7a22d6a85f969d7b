// Handing a listening socket from one server to the next (a standby that starts to lead): a
// client that connects in between waits in the socket's backlog and is answered by the next
// server, a request in progress is answered before the first one stops, and a descriptor that is
// not a listening socket is refused by name.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "net/http_server.h"

namespace tessera::net {
namespace {

// A server answering GET /who with `name`, and GET /slow with `name` after 300 ms.
std::unique_ptr<HttpServer> Named(const std::string& name) {
  auto s = std::make_unique<HttpServer>(HttpServerOptions{});
  s->Route("GET", "/who", [name](const HttpRequest&, HttpResponse& res) { res.body = name; });
  s->Route("GET", "/slow", [name](const HttpRequest&, HttpResponse& res) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    res.body = name;
  });
  return s;
}

std::string Fetch(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(10);
  c.set_read_timeout(10);
  auto r = c.Get(path.c_str());
  return r ? r->body : "(no answer: " + httplib::to_string(r.error()) + ")";
}

TEST(Handover, AClientConnectingBetweenTheTwoServersIsAnsweredByTheSecond) {
  auto first = Named("first");
  auto port = first->Bind("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status().message();
  std::thread run([&] { first->Run(); });
  EXPECT_EQ(Fetch(*port, "/who"), "first");

  first->StopForHandover(1000);
  run.join();
  const int fd = first->ReleaseListener();
  ASSERT_GE(fd, 0);
  first.reset();  // the first server is gone; the socket is not

  // Nobody serves now: the client's connection waits in the backlog.
  auto answer = std::async(std::launch::async, [&] { return Fetch(*port, "/who"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto second = Named("second");
  auto again = second->Adopt(fd);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(*again, *port);
  std::thread run2([&] { second->Run(); });
  EXPECT_EQ(answer.get(), "second");
  EXPECT_EQ(Fetch(*port, "/who"), "second");
  second->Stop();
  run2.join();
}

TEST(Handover, ARequestInProgressIsAnsweredBeforeTheServerStops) {
  auto first = Named("first");
  auto port = first->Bind("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  std::thread run([&] { first->Run(); });
  auto slow = std::async(std::launch::async, [&] { return Fetch(*port, "/slow"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the request is in progress
  first->StopForHandover(2000);
  run.join();
  EXPECT_EQ(slow.get(), "first");
  const int fd = first->ReleaseListener();
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
}

TEST(Handover, ADescriptorThatIsNotAListeningSocketIsRefused) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  auto s = Named("x");
  auto r = s->Adopt(fds[0]);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a listening TCP socket"), std::string::npos)
      << r.status().message();
  close(fds[1]);
  // A server that never listened has no socket to give.
  EXPECT_EQ(Named("y")->ReleaseListener(), -1);
}

}  // namespace
}  // namespace tessera::net
