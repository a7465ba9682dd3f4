// Which NICs should move a memory's bytes: those on the memory's NUMA node
// first, and among them the nearest on the PCIe tree (fewest steps from the
// memory's device to the NIC through their common bridge), as Mooncake's
// topology does. Read from a sysfs tree (the real /sys, or a fake one in
// tests): <root>/class/infiniband/<nic>/device links to the NIC's PCI
// device; <root>/bus/pci/devices/<bdf> to a GPU's; each has numa_node.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tensorhub::rdma {

struct NicPlace {
  std::string name;
  int numa_node = -1;      // -1: unknown
  std::string pci_path;    // the device's real path under <root>/devices; empty: unknown
};

// Where the NIC named `name` sits.
NicPlace nic_place(const std::string& sysfs_root, const std::string& name);
// Where the PCI device `bdf` (a GPU, "0000:17:00.0") sits; nothing when absent.
std::optional<NicPlace> pci_place(const std::string& sysfs_root, const std::string& bdf);

// Steps between two devices on the PCIe tree: the path components of each
// below their common prefix, added. Unknown paths are farthest.
int pcie_distance(const std::string& a, const std::string& b);

// `nics` ordered by preference for memory at `memory` (a GPU's place; for
// host memory its NUMA node and no path): same NUMA node first, then by
// PCIe distance, then by name. `preferred` counts the leading NICs that tie
// for best: whole blocks are striped over them.
struct NicRanking {
  std::vector<NicPlace> nics;
  std::size_t preferred = 0;
};
NicRanking rank_nics(std::vector<NicPlace> nics, const NicPlace& memory);

}  // namespace tensorhub::rdma
