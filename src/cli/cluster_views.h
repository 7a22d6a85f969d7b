// `tessera queues`, `groups` and `nodes` (cmd_cluster.cc): what the server shows of the cluster.
#pragma once

#include "cli/client.h"

namespace tessera::cli {

void ListQueues(const ClientOptions& co, int* exit_code);
void ListGroups(const ClientOptions& co, int* exit_code);
void ListNodes(const ClientOptions& co, int* exit_code);

}  // namespace tessera::cli
