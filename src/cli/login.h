// `tessera login`: sign in at the server's OpenID Connect provider with the device code flow
// (RFC 8628): the command shows a code and a page, the person signs in there in any browser,
// and the tokens are kept in a 0600 file (TESSERA_LOGIN_FILE, default
// ~/.config/tessera/login.json). Later commands without another token use its ID token,
// refreshed with its refresh token shortly before it expires.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "cli/commands.h"
#include "common/status.h"
#include "net/client_tls.h"

namespace tessera::cli {

void RegisterLoginCommand(CLI::App& app, CommandContext& ctx);

// Where the login is kept: $TESSERA_LOGIN_FILE, else ~/.config/tessera/login.json.
std::string LoginFilePath();

// The ID token of the kept login (refreshed first when it expires within a minute), or NotFound
// when there is none, or an error saying to run `tessera login` again.
Result<std::string> LoginToken(const net::ClientTls& tls);

}  // namespace tessera::cli
