#include "common/accounts.h"

#include <grp.h>

#include <algorithm>

namespace tessera {

std::vector<gid_t> GroupsOfAccount(const std::string& user, gid_t primary) {
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (getgrouplist(user.c_str(), primary, groups.data(), &n) < 0) {
    groups.resize(static_cast<size_t>(n));  // n is now how many there are
    getgrouplist(user.c_str(), primary, groups.data(), &n);
  }
  groups.resize(static_cast<size_t>(std::max(n, 0)));
  return groups;
}

}  // namespace tessera
