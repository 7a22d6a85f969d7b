#include "common/accounts.h"

#include <grp.h>
#include <pwd.h>

#include <algorithm>

namespace tessera {

std::optional<AccountEntry> FindAccount(const std::string& name) {
  if (name.empty()) return std::nullopt;
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr)
    return std::nullopt;
  return AccountEntry{pw.pw_uid, pw.pw_gid, pw.pw_dir != nullptr ? pw.pw_dir : "/"};
}

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
