#include "cli/up_config.h"

#include <pwd.h>
#include <unistd.h>

#include <vector>

#include "api/config.h"

namespace tessera::cli {

// The example configuration `tessera up` writes: queues for notebooks (shares), inference and
// training over the local simulated node.
// Jobs never run as root: as root, `tessera up` runs alice's and admin's jobs as the unprivileged
// `nobody`; as anyone else, as that user (the only account a non-root agent can run jobs as).
std::string LocalJobAccount() {
  if (geteuid() == 0) return "nobody";
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(geteuid(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr)
    return pw.pw_name;
  return "nobody";
}

std::string ExampleConfig(const std::string& admin, const std::string& user,
                          const std::string& agent) {
  const std::string account = LocalJobAccount();
  return R"(# Written by `tessera up`. Tokens are stored as SHA-256 hashes only.
cluster: local
heartbeat_timeout: 10s
cancel_grace: 5s
identities:
# Jobs run under each identity's Unix account (run_as; by default the identity's own name), never
# as root. On one host both run as )" +
         account + R"( here: give each person an account of their own.
  - {name: admin, role: admin, run_as: )" +
         account + R"(, token_sha256: )" + api::Sha256Hex(admin) + R"(}
  - {name: alice, role: user, groups: [research], run_as: )" +
         account + R"(, token_sha256: )" + api::Sha256Hex(user) + R"(}
  - {name: local-agent, role: agent, nodes: [local], token_sha256: )" +
         api::Sha256Hex(agent) + R"(}
groups:
  - name: research
    reservation: {gpu: 1}
    limit: {gpu: 3, cpu: 16, memory: 64GiB}
  - name: production
    reservation: {gpu: 1}
    limit: {gpu: 2}
grace: 10s
pools:
  - {name: default, forms: [whole, partition, share]}
profiles:
  - {name: notebook, gpus: 1, gpu_fraction: 0.1, gpu_memory: 8GiB, max_gpu_memory: 16GiB, cpu: 500m, memory: 1GiB, forms: [share]}
  - {name: inference, gpus: 1, gpu_fraction: 0.1, gpu_memory: 20GiB, max_gpu_memory: 40GiB, cpu: 500m, memory: 2GiB, forms: [partition, share, whole]}
  - {name: training, gpus: 1, max_gpus: 2, cpu: 500m, memory: 2GiB, forms: [whole]}
class_forms:
  inference: [partition, share, whole]
queues:
  - {name: notebooks, profile: notebook, groups: [research], priority: 10, class: interactive, preemptible: true}
  - {name: inference, profile: inference, groups: [research, production], priority: 20, class: inference}
  - {name: training, profile: training, groups: [research], priority: 5, class: training, preemptible: true}
)";
}

}  // namespace tessera::cli
