// A Kubernetes cluster's GPU capacity for Tessera, from what it lists: whole cards (extended
// resources) on ready, schedulable nodes less what pods of others request there, and what the
// GPU drivers' ResourceSlices (Dynamic Resource Allocation, resource.k8s.io/v1) offer less what
// claims of others hold. Pure: it reads the lists the backend made (kubernetes.cc).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "backends/kubernetes/client.h"
#include "backends/kubernetes/manifest.h"

namespace tessera::backends::kube {

// What the GPU drivers' ResourceSlices offer Tessera, in thousandths of a card:
// - a counter set (partitionable devices: a card and the MIG devices that share its counters)
//   stands for one card; what devices allocated to claims of others consume of it is taken off,
//   by the counter they use most of (exact integer division, rounded down);
// - a MIG device consuming no counters stands for its profile's compute slices ("3g.40gb": 3)
//   out of its parent card's (7; 4 for an A30), summed per parent (parentUUID) before dividing;
// - any other device is one card.
// Devices allocated to claims Tessera does not manage (not labelled with our cluster) are held.
struct DraCapacity {
  int64_t total_milli = 0, free_milli = 0;
  int64_t devices = 0, mig = 0, held = 0;
  std::set<std::string> nodes;            // nodes whose GPUs come through DRA
  std::map<std::string, int64_t> models;  // product -> free thousandths
};

// `slices` and `claims` by "ns/name"; `ready`: the nodes that may take work; `cluster`: the
// tessera.io/cluster label of the claims Tessera manages.
DraCapacity ReadDra(const std::map<std::string, Json>& slices,
                    const std::map<std::string, Json>& claims, const std::set<std::string>& ready,
                    const std::string& cluster);

// Whole cards (nvidia.com/gpu, amd.com/gpu) allocatable on ready, schedulable `nodes`, less what
// running or pending `pods` of others request there ("Managing Resources for Containers":
// extended resources are integers; limits stand for requests when requests are absent). Nodes
// whose GPUs are published as ResourceSlices count by those instead (ReadDra). Objects by
// "ns/name"; `cluster`: the tessera.io/cluster label of what Tessera manages.
Capacity ReadCapacity(const std::map<std::string, Json>& nodes,
                      const std::map<std::string, Json>& pods,
                      const std::map<std::string, Json>& slices,
                      const std::map<std::string, Json>& claims, const std::string& cluster);

// The nodes whose GPUs some GPU driver's ResourceSlice publishes.
std::set<std::string> GpuSliceNodes(const std::map<std::string, Json>& slices);

// Thousandths of a card as a card count: 2000 -> "2", 857 -> "0.857".
std::string Cards(int64_t milli);

}  // namespace tessera::backends::kube
