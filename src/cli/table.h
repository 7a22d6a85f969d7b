// Tables for people: left-aligned columns two spaces apart; the first row is the header.
#pragma once

#include <string>
#include <vector>

namespace tessera::cli {

void PrintTable(const std::vector<std::vector<std::string>>& rows);

}  // namespace tessera::cli
