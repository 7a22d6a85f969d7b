// Libraries opened at run time (src/agent/dynamic_library.h), and how the agent's users of NVML
// and AMD SMI refuse a library that loads but lacks the calls they cannot do without (the C
// library stands in for it).
#include "agent/dynamic_library.h"

#include <gtest/gtest.h>

#include <cstring>

#include "agent/amd_smi.h"
#include "agent/device_health.h"
#include "agent/nvml_mig.h"

namespace tessera::agent {
namespace {

TEST(DynamicLibrary, ALibraryThatDoesNotLoadSaysWhy) {
  DynamicLibrary lib("/nonexistent/libnothing.so");
  EXPECT_FALSE(lib.loaded());
  EXPECT_NE(lib.error().find("/nonexistent/libnothing.so"), std::string::npos) << lib.error();
  EXPECT_EQ(lib.Symbol<int (*)()>("anything"), nullptr);
}

TEST(DynamicLibrary, OnlyARequiredCallTheLibraryLacksFailsTheBinding) {
  DynamicLibrary lib("libc.so.6");
  ASSERT_TRUE(lib.loaded()) << lib.error();
  EXPECT_EQ(lib.error(), "");
  size_t (*length)(const char*) = nullptr;
  int (*missing)() = +[] { return 1; };  // not null before: the binder sets it
  SymbolBinder sym(lib);
  sym(length, "strlen");
  sym(missing, "tessera_no_such_call", false);
  ASSERT_NE(length, nullptr);
  EXPECT_EQ(length("four"), 4u);
  EXPECT_EQ(missing, nullptr) << "an optional call the library lacks is null";
  EXPECT_TRUE(sym.all());
  sym(missing, "tessera_no_such_call");
  EXPECT_FALSE(sym.all());
}

TEST(DynamicLibrary, NvmlAndAmdSmiUsersRefuseALibraryLackingTheirCalls) {
  auto health = NvmlHealth::Open("libc.so.6");
  ASSERT_FALSE(health.ok());
  EXPECT_EQ(health.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(health.status().message(), "no NVML: libc.so.6 lacks the device calls");
  auto mig = NvmlMig::Open("libc.so.6");
  ASSERT_FALSE(mig.ok());
  EXPECT_EQ(mig.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(mig.status().message(), "no NVML: libc.so.6 lacks the MIG calls (driver too old?)");
  auto smi = AmdSmi::Open("libc.so.6");
  ASSERT_FALSE(smi.ok());
  EXPECT_EQ(smi.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(smi.status().message(), "no AMD SMI: libc.so.6 lacks the GPU calls");
}

}  // namespace
}  // namespace tessera::agent
