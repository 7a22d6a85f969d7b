// Text for people: tables (left-aligned columns two spaces apart; the first row is the header),
// durations and times as a person reads them, and "did you mean" for a mistyped name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::cli {

void PrintTable(const std::vector<std::vector<std::string>>& rows);

// 45 -> "45s", 300 -> "5m", 5400 -> "1h30m", 200000 -> "2d7h" (negative: as its magnitude).
std::string HumanDuration(int64_t seconds);

// `text` with every server time in it ("t=1796242375s": seconds since the Unix epoch, as the
// scheduler's reasons write them) as a clock time and how far it is from `now_ms`:
// "expected free at t=1796242375s" -> "expected free at 14:32 UTC (in 59m)". Smaller values are
// not wall-clock times (a simulation's seconds) and are left as they are.
std::string HumanTimes(const std::string& text, int64_t now_ms);

// A server's rounded-down decimal ("0.000" GPU-hours) for people: "<0.001" when the exact amount
// behind it (`exact`, in the server's integer unit) is not zero, so a short job's use does not
// read as none; any other text as it is.
std::string RoundedDown(const std::string& decimal, int64_t exact);

// The items joined by `sep`: {"a", "b"}, ", " -> "a, b".
std::string Join(const std::vector<std::string>& items, const std::string& sep);

// A value that is not one of `names`, said for people: "unknown state 'runing'; did you mean
// running? (one of pending, running, ...)"; `what` is the kind of name ("state", "policy").
std::string UnknownChoice(const std::string& what, const std::string& given,
                          const std::vector<std::string>& names);

// The name in `names` closest to `word` (a typo's correction: at most a third of its letters
// differ, or it begins `word`), "" when none is that close.
std::string Closest(const std::string& word, const std::vector<std::string>& names);

}  // namespace tessera::cli
