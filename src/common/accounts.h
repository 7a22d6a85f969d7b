// Local accounts, as the agent and the batch backends start work under them.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace tessera {

// The groups of the account `user` whose primary group is `primary` (getgrouplist: the primary
// included), however many there are; empty when the system cannot say.
std::vector<gid_t> GroupsOfAccount(const std::string& user, gid_t primary);

}  // namespace tessera
