// Local accounts, as the agent and the batch backends start work under them.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace tessera {

// An account as this host's user database (NSS: files, LDAP) has it.
struct AccountEntry {
  uid_t uid = 0;
  gid_t gid = 0;  // its primary group
  std::string home;
};
// The account `name`; nullopt when the host has none of that name (or the lookup fails).
std::optional<AccountEntry> FindAccount(const std::string& name);

// The groups of the account `user` whose primary group is `primary` (getgrouplist: the primary
// included), however many there are; empty when the system cannot say.
std::vector<gid_t> GroupsOfAccount(const std::string& user, gid_t primary);

}  // namespace tessera
