// The names of an enum's values in one table, in the order of the values (0, 1, ...): the name
// of a value, the value of a name and the list of the names (for an error message), instead of a
// switch for each direction in each module.
//
//   constexpr auto kColorNames = NamesUpTo<Color::kBlue>("red", "green", "blue");
//   kColorNames.Of(Color::kGreen, "?")  // "green"; "?" for a value outside the enum
//   kColorNames.Find("blue")            // Color::kBlue; nullopt for any other text
//   kColorNames.List()                  // "red, green, blue"
//
// Thread-safety: constant tables.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

// Whether `a` and `b` are the same text, ASCII letters of either case alike.
constexpr bool EqualIgnoringAsciiCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

template <typename E, size_t N>
struct EnumNames {
  std::array<const char*, N> names;  // names[i]: the name of the value i

  // The name of `e`, or `unknown` for a value outside the table.
  constexpr const char* Of(E e, const char* unknown) const {
    const auto i = static_cast<size_t>(e);
    return i < N ? names[i] : unknown;
  }
  // The value named `text` (ASCII letters of either case alike when `ignore_case`), or nullopt.
  constexpr std::optional<E> Find(std::string_view text, bool ignore_case = false) const {
    for (size_t i = 0; i < N; ++i) {
      if (ignore_case ? EqualIgnoringAsciiCase(text, names[i]) : text == names[i])
        return static_cast<E>(i);
    }
    return std::nullopt;
  }
  // The names in order, separated by ", ".
  std::string List() const {
    std::string out;
    for (const char* n : names) out += (out.empty() ? "" : ", ") + std::string(n);
    return out;
  }
};

// The table of an enum whose values run from 0 to `kLast`: one name for each value, in order.
template <auto kLast, typename... Names>
constexpr EnumNames<decltype(kLast), sizeof...(Names)> NamesUpTo(Names... names) {
  static_assert(static_cast<size_t>(kLast) + 1 == sizeof...(Names),
                "one name for each value of the enum, in order");
  return {{names...}};
}

}  // namespace tessera
