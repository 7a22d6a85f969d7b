// Text that crosses a boundary: what a request, an agent or a user hands us may be any bytes,
// and what we store, render as JSON or print on a terminal must not break its reader. The
// rules: strings that name things (paths, query parameters, node names, keys) are refused
// unless they are valid UTF-8 without control characters; free text that is only recorded
// (an event's reason) is made valid (each invalid byte becomes U+FFFD); anything printed on a
// terminal has its control characters escaped.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace tessera {

// Whether `s` is well-formed UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
bool IsValidUtf8(std::string_view s);

// Whether `s` holds a C0 control character (below 0x20), DEL, a C1 control (U+0080..U+009F), or
// a bidirectional formatting character (U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069),
// which reorders what a terminal shows.
bool HasControlCharacters(std::string_view s);

// Valid UTF-8 without control characters: the test for a name or a parameter.
inline bool IsCleanText(std::string_view s) { return IsValidUtf8(s) && !HasControlCharacters(s); }

// `s` with every byte that is not part of a well-formed UTF-8 sequence replaced by U+FFFD.
std::string ToValidUtf8(std::string_view s);

// `s` made safe for a terminal: valid UTF-8 (as ToValidUtf8), and every control character
// (ESC, CR, BEL, C1 controls, bidirectional formatting...) written as a visible escape such as
// \x1b, \u009b or \u202e.
std::string EscapeForTerminal(std::string_view s);

// A piece of a job's output made safe for a terminal (EscapeForTerminal) but for its line breaks
// and tabs, which stay: a job's printf of ESC ] 52 wrote to the clipboard of whoever ran `tessera
// job` on it (the red team). A UTF-8 sequence cut at the piece's end waits in *carry for the next
// piece (pass "" at the end to flush it).
std::string EscapeOutputForTerminal(std::string_view piece, std::string* carry);

// The line that ends a job's output cut at `max` bytes ("\n<who>: output cut at <max> bytes
// (<limit>); the rest was dropped\n"), or "" where `max` has no room for it (less than four
// times its length): a small limit is a plain cut. The node agent's and the server's cut both.
std::string OutputCutNote(std::string_view who, int64_t max, std::string_view limit);

// `s` as recorded where anyone may send it (a request's path in the request log and in an
// auth.failed event): whole up to `max` bytes; longer, its first `max` bytes (not splitting a
// UTF-8 sequence) and "...(N bytes)".
std::string CutForRecord(std::string_view s, size_t max = 256);

// `s` as a URL path segment or query value (RFC 3986): its unreserved characters (letters,
// digits, - _ . ~) as they are, every other byte as %XX.
std::string PercentEncoded(std::string_view s);

// `s` with each character that `escapes` names written as its escape, the rest as they are: the
// one loop behind a format's escaping (HTML text: {'<', "&lt;"}, {'>', "&gt;"}, {'&', "&amp;"};
// a Prometheus label value: {'\\', "\\\\"}, {'"', "\\\""}, {'\n', "\\n"}).
std::string EscapeChars(std::string_view s,
                        std::initializer_list<std::pair<char, std::string_view>> escapes);

}  // namespace tessera
