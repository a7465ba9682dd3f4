#include <infiniband/verbs.h>

#include <cstdio>

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
          info.ports.push_back(RdmaPortInfo{p, port_state_name(port.state),
                                            port.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand",
                                            128u << port.active_mtu});
        }
      }
      ibv_close_device(ctx);
    }
    out.devices.push_back(std::move(info));
  }
  ibv_free_device_list(list);
  if (out.devices.empty()) out.note = "no RDMA device on this machine";
  return out;
}

}  // namespace tensorhub
