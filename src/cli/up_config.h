// What `tessera up` writes into its data directory on first start (cmd_engine.cc): the example
// configuration, with the accounts its jobs run as.
#pragma once

#include <string>

namespace tessera::cli {

// The Unix account the example's identities run their jobs as: `nobody` as root, else the user.
std::string LocalJobAccount();

// The example configuration, its identities' tokens (admin, user alice, the local agent) stored
// as SHA-256 hashes.
std::string ExampleConfig(const std::string& admin, const std::string& user,
                          const std::string& agent);

}  // namespace tessera::cli
