// The library's names the hook files (hooks_*.cc) use, imported once. The hooks themselves are
// extern "C" functions at global scope, where hook_table.h declares them with default
// visibility; a redeclaration inside the namespace would lose it, so the names come to them
// instead. Private to the hook files.
#pragma once

#include "capgpu/hook_table.h"
#include "capgpu/real_driver.h"
#include "capgpu/runtime.h"

using tessera::capgpu::AllocKind;
using tessera::capgpu::CurrentDevice;
using tessera::capgpu::FindHookBySymbol;
using tessera::capgpu::FindHookForProcAddress;
using tessera::capgpu::g_real_functions;
using tessera::capgpu::GateScope;
using tessera::capgpu::HookId;
using tessera::capgpu::HookInfo;
using tessera::capgpu::kHookCount;
using tessera::capgpu::kHooks;
using tessera::capgpu::Library;
using tessera::capgpu::Real;
using tessera::capgpu::ResolveHelper;
using tessera::capgpu::ResolveReal;
using tessera::capgpu::Runtime;
using tessera::capgpu::Swapper;
using tessera::capgpu::Unswappable;
