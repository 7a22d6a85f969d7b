// Moved to tests/support/test_dir.h (the shared test utilities, tests/README.md).
#pragma once

#include "../support/test_dir.h"
