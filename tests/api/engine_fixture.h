// Moved to tests/support/engine_fixture.h (the shared test utilities, tests/README.md).
#pragma once

#include "../support/engine_fixture.h"
