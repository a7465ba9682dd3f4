#include <infiniband/verbs.h>

#include <cstdio>

#include "rdma/nic_affinity.hpp"
#include "tensorhub/devices.hpp"

namespace tensorhub {
namespace {

std::string port_state_name(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_ACTIVE: return "active";
    case IBV_PORT_DOWN: return "down";
    case IBV_PORT_INIT: return "init";
    case IBV_PORT_ARMED: return "armed";
    default: return "other";
  }
}

std::string gid_text(const ibv_gid& gid) {
  char out[40];
  char* at = out;
  for (int i = 0; i < 16; i += 2) {
    at += std::snprintf(at, out + sizeof out - at, i == 0 ? "%02x%02x" : ":%02x%02x", gid.raw[i], gid.raw[i + 1]);
  }
  return out;
}

}  // namespace

RdmaDevices list_rdma_devices() {
  RdmaDevices out;
  out.built = true;
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr) {
    out.note = "no RDMA subsystem (ibv_get_device_list failed)";
    return out;
  }
  for (int i = 0; i < count; ++i) {
    RdmaDeviceInfo info;
    info.name = ibv_get_device_name(list[i]);
    char guid[32];
    std::snprintf(guid, sizeof guid, "%016llx",
                  static_cast<unsigned long long>(be64toh(ibv_get_device_guid(list[i]))));
    info.node_guid = guid;
    if (ibv_context* ctx = ibv_open_device(list[i])) {
      ibv_device_attr attr{};
      if (ibv_query_device(ctx, &attr) == 0) {
        for (std::uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
          ibv_port_attr port{};
          if (ibv_query_port(ctx, p, &port) != 0) continue;
          ibv_gid gid{};
          info.ports.push_back(RdmaPortInfo{p, port_state_name(port.state),
                                            port.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand",
                                            128u << port.active_mtu,
                                            ibv_query_gid(ctx, p, 0, &gid) == 0 ? gid_text(gid) : std::string()});
        }
      }
      ibv_close_device(ctx);
    }
    info.numa_node = rdma::nic_place("/sys", info.name).numa_node;
    out.devices.push_back(std::move(info));
  }
  ibv_free_device_list(list);
  if (out.devices.empty()) out.note = "no RDMA device on this machine";
  return out;
}

std::vector<std::string> nics_near_gpu(const RdmaDevices& nics, const std::string& pci_bus_id,
                                       const std::string& sysfs_root) {
  auto gpu = rdma::pci_place(sysfs_root, pci_bus_id);
  if (!gpu || nics.devices.empty()) return {};
  std::vector<rdma::NicPlace> places;
  for (const auto& d : nics.devices) places.push_back(rdma::nic_place(sysfs_root, d.name));
  const rdma::NicRanking ranked = rdma::rank_nics(std::move(places), *gpu);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < ranked.preferred; ++i) out.push_back(ranked.nics[i].name);
  return out;
}

}  // namespace tensorhub
