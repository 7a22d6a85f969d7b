// A shared library opened at run time (dlopen, RTLD_NOW | RTLD_LOCAL) and closed with its owner:
// how the agent reaches NVML (discovery, telemetry, MIG, device health) and AMD SMI without a
// link-time dependency on either.
//
// Thread-safety: Symbol is safe from any thread once constructed; a SymbolBinder is one thread's.
#pragma once

#include <dlfcn.h>

#include <string>

namespace tessera::agent {

class DynamicLibrary {
 public:
  // Opens `path`; loaded() says whether it did, error() why not.
  explicit DynamicLibrary(const std::string& path)
      : handle_(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) {
      const char* why = dlerror();
      error_ = why != nullptr ? why : "unknown error";
    }
  }
  ~DynamicLibrary() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  // dlerror's words when the library did not load ("" when it did).
  const std::string& error() const { return error_; }
  // The function `name` as `Fn`; null where the library lacks it (or did not load).
  template <typename Fn>
  Fn Symbol(const char* name) const {
    return handle_ != nullptr ? reinterpret_cast<Fn>(dlsym(handle_, name)) : nullptr;
  }

 private:
  void* handle_;
  std::string error_;
};

// Sets a library's function pointers one after another, noting whether each one required was
// there: `SymbolBinder sym(lib); sym(init, "nvmlInit_v2"); sym(ecc, "...", false);`, then all()
// says whether the library has the calls its user cannot do without.
class SymbolBinder {
 public:
  explicit SymbolBinder(const DynamicLibrary& lib) : lib_(lib) {}
  // Sets `fn` to the function `name` (null where the library lacks it).
  template <typename Fn>
  void operator()(Fn& fn, const char* name, bool required = true) {
    fn = lib_.Symbol<Fn>(name);
    if (fn == nullptr && required) all_ = false;
  }
  bool all() const { return all_; }

 private:
  const DynamicLibrary& lib_;
  bool all_ = true;
};

}  // namespace tessera::agent

// A user of a library lists the calls it makes once, as X(member, symbol, required, return type,
// parameters) rows of a macro, and generates from that one list both the struct members that hold
// them (TESSERA_LIBRARY_CALL_MEMBER: a function pointer, null until bound) and their binding
// (TESSERA_LIBRARY_CALL_BIND, with `sym` a SymbolBinder in scope), so that the two cannot drift.
#define TESSERA_LIBRARY_CALL_MEMBER(member, symbol, required, ret, params) \
  ret(*member) params = nullptr;
#define TESSERA_LIBRARY_CALL_BIND(member, symbol, required, ret, params) \
  sym(member, symbol, required);

// The members a struct over one library starts with, from its list of calls (CALLS, a macro of
// X rows as above): a constructor from the library's path, `DynamicLibrary lib`, a function
// pointer a call, and `bool BindCalls()`, which binds them all and is false where the library
// lacks a required one. `Name` is the struct's name.
#define TESSERA_LIBRARY_API(Name, CALLS)                      \
  explicit Name(const std::string& library) : lib(library) {} \
  ::tessera::agent::DynamicLibrary lib;                       \
  CALLS(TESSERA_LIBRARY_CALL_MEMBER)                          \
  bool BindCalls() {                                          \
    ::tessera::agent::SymbolBinder sym(lib);                  \
    CALLS(TESSERA_LIBRARY_CALL_BIND)                          \
    return sym.all();                                         \
  }
