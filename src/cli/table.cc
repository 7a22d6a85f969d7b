#include "cli/table.h"

#include <algorithm>
#include <iostream>

#include "common/text.h"

namespace tessera::cli {

void PrintTable(const std::vector<std::vector<std::string>>& raw) {
  // Every cell is text from the server (node names, reasons, job names): its control characters
  // are shown escaped, never sent to the terminal as they came.
  std::vector<std::vector<std::string>> rows = raw;
  for (auto& row : rows) {
    for (std::string& cell : row) cell = EscapeForTerminal(cell);
  }
  std::vector<size_t> width;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    std::cout << line << "\n";
  }
}

}  // namespace tessera::cli
