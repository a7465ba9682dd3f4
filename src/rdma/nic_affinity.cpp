#include "rdma/nic_affinity.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <tuple>

namespace tensorhub::rdma {
namespace {

namespace fs = std::filesystem;

int read_numa_node(const fs::path& device) {
  std::ifstream in(device / "numa_node");
  int node = -1;
  if (!(in >> node) || node < -1 || node > 1023) return -1;
  return node;
}

std::string real_path(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::canonical(p, ec);
  return ec ? std::string() : r.string();
}

std::vector<std::string> components(const std::string& path) {
  std::vector<std::string> out;
  for (const auto& part : fs::path(path)) {
    if (part != "/" && !part.empty()) out.push_back(part.string());
  }
  return out;
}

}  // namespace

NicPlace nic_place(const std::string& sysfs_root, const std::string& name) {
  NicPlace p;
  p.name = name;
  const fs::path device = fs::path(sysfs_root) / "class" / "infiniband" / name / "device";
  p.pci_path = real_path(device);
  if (!p.pci_path.empty()) p.numa_node = read_numa_node(device);
  return p;
}

std::optional<NicPlace> pci_place(const std::string& sysfs_root, const std::string& bdf) {
  const fs::path device = fs::path(sysfs_root) / "bus" / "pci" / "devices" / bdf;
  NicPlace p;
  p.name = bdf;
  p.pci_path = real_path(device);
  if (p.pci_path.empty()) return std::nullopt;
  p.numa_node = read_numa_node(device);
  return p;
}

int pcie_distance(const std::string& a, const std::string& b) {
  constexpr int kFar = 1 << 20;
  if (a.empty() || b.empty()) return kFar;
  const auto ca = components(a), cb = components(b);
  std::size_t common = 0;
  while (common < ca.size() && common < cb.size() && ca[common] == cb[common]) ++common;
  return static_cast<int>(ca.size() - common + cb.size() - common);
}

NicRanking rank_nics(std::vector<NicPlace> nics, const NicPlace& memory) {
  auto key = [&](const NicPlace& n) {
    const bool same_node = memory.numa_node >= 0 && n.numa_node == memory.numa_node;
    const int distance = memory.pci_path.empty() ? 0 : pcie_distance(n.pci_path, memory.pci_path);
    return std::make_tuple(same_node ? 0 : 1, distance);
  };
  std::stable_sort(nics.begin(), nics.end(), [&](const NicPlace& x, const NicPlace& y) {
    const auto kx = key(x), ky = key(y);
    return kx != ky ? kx < ky : x.name < y.name;
  });
  NicRanking out;
  out.nics = std::move(nics);
  while (out.preferred < out.nics.size() && key(out.nics[out.preferred]) == key(out.nics[0])) ++out.preferred;
  return out;
}

}  // namespace tensorhub::rdma
