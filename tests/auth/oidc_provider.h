// The test provider (tests/auth/provider/provider.mjs, the npm package oidc-provider) as a real
// process, and tokens from it by the device code flow (device_flow.mjs drives the user's side
// through the provider's own pages). Needs `npm ci` in tests/auth/provider (scripts/setup.sh).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/proc.h"
#include "support/free_port.h"
#include "support/shell.h"
#include "support/wait.h"

namespace tessera::testing {

inline const std::string kProviderDir = TESSERA_SOURCE_DIR "/tests/auth/provider";

class TestProvider {
 public:
  // A provider on a free port with its keys in `keys_file` (kept across Restart).
  TestProvider(std::string keys_file, std::vector<std::string> args = {})
      : keys_(std::move(keys_file)), args_(std::move(args)), port_(FreePort()) {}
  // Starts (or starts again, on the same port: the same issuer) with `extra` arguments too
  // (--rotate). False, with the log in `why`, when it did not say ready. It is given a minute: on a
  // loaded two-core machine (the Slurm tests beside it) node once took over 20 s to say it.
  ::testing::AssertionResult Start(const std::vector<std::string>& extra = {}) {
    if (!std::filesystem::exists(kProviderDir + "/node_modules/oidc-provider")) {
      return ::testing::AssertionFailure()
             << "oidc-provider is not installed: run scripts/setup.sh (npm ci in " << kProviderDir
             << ")";
    }
    proc_.reset();
    std::vector<std::string> argv = {
        "/usr/bin/env", "node", kProviderDir + "/provider.mjs", "--port", std::to_string(port_),
        "--keys",       keys_};
    argv.insert(argv.end(), args_.begin(), args_.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::filesystem::remove(keys_ + ".log");  // not to read the last run's "ready"
    proc_ = std::make_unique<Proc>(argv, keys_ + ".log");
    if (!WaitFor(
            [&] { return proc_->Log().find("ready ") != std::string::npos || !proc_->Alive(); },
            std::chrono::seconds(60)) ||
        !proc_->Alive()) {
      return ::testing::AssertionFailure()
             << "the provider did not start (" << (proc_->Alive() ? "silent for 60 s" : "it exited")
             << "): " << proc_->Log();
    }
    return ::testing::AssertionSuccess();
  }
  void Stop() { proc_.reset(); }
  std::string issuer() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // The token answer (id_token, refresh_token, ...) for `user` signing in to `client`.
  nlohmann::json Tokens(const std::string& user, const std::string& client = "tessera") const {
    auto r = RunShell("cd " + kProviderDir + " && node device_flow.mjs " + issuer() + " " + client +
                      " " + user + " 2>&1");
    EXPECT_EQ(r.code, 0) << r.out;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("id_token")) << r.out;
    return j;
  }
  std::string IdToken(const std::string& user, const std::string& client = "tessera") const {
    return Tokens(user, client).value("id_token", "");
  }

 private:
  std::string keys_;
  std::vector<std::string> args_;
  int port_;
  std::unique_ptr<Proc> proc_;
};

}  // namespace tessera::testing
