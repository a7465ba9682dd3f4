// tensorhub devices: the RDMA NICs and CUDA GPUs this build can use.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/cli_common.hpp"
#include "core/byte_size.hpp"
#include "tensorhub/devices.hpp"

namespace tensorhub::cli {

void add_devices_command(CLI::App& app, int& exit_code) {
  auto json = std::make_shared<bool>(false);
  CLI::App* c = app.add_subcommand("devices", "List the RDMA devices and CUDA GPUs this build can use");
  c->add_flag("--json", *json, "As JSON");
  c->callback([json, &exit_code] {
    const RdmaDevices rdma = list_rdma_devices();
    const CudaDevices cuda = list_cuda_devices();
    if (*json) {
      nlohmann::ordered_json j;
      j["rdma"]["built"] = rdma.built;
      j["rdma"]["note"] = rdma.note;
      j["rdma"]["devices"] = nlohmann::ordered_json::array();
      for (const auto& d : rdma.devices) {
        nlohmann::ordered_json ports = nlohmann::ordered_json::array();
        for (const auto& p : d.ports) {
          ports.push_back({{"port", p.port},
                           {"state", p.state},
                           {"link_layer", p.link_layer},
                           {"mtu", p.active_mtu},
                           {"gid", p.gid}});
        }
        j["rdma"]["devices"].push_back(
            {{"name", d.name}, {"guid", d.node_guid}, {"numa_node", d.numa_node}, {"ports", ports}});
      }
      j["cuda"]["built"] = cuda.built;
      j["cuda"]["note"] = cuda.note;
      j["cuda"]["devices"] = nlohmann::ordered_json::array();
      for (const auto& d : cuda.devices) {
        j["cuda"]["devices"].push_back({{"index", d.index},
                                        {"name", d.name},
                                        {"uuid", d.uuid},
                                        {"memory", d.total_memory},
                                        {"compute", std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor)},
                                        {"gpudirect_rdma", d.gpudirect_rdma},
                                        {"dma_buf", d.dma_buf},
                                        {"peermem", d.peermem},
                                        {"rdma_registration", d.rdma_registration},
                                        {"pci_bus_id", d.pci_bus_id},
                                        {"nics", nics_near_gpu(rdma, d.pci_bus_id)}});
      }
      std::printf("%s\n", j.dump(2).c_str());
      exit_code = kExitOk;
      return;
    }
    std::printf("RDMA: %s\n", rdma.devices.empty() ? rdma.note.c_str() : "");
    for (const auto& d : rdma.devices) {
      std::printf("  %s guid %s numa %d\n", d.name.c_str(), d.node_guid.c_str(), d.numa_node);
      for (const auto& p : d.ports) {
        std::printf("    port %u %s %s mtu %u gid %s\n", p.port, p.state.c_str(), p.link_layer.c_str(), p.active_mtu,
                    p.gid.c_str());
      }
    }
    std::printf("CUDA: %s\n", cuda.devices.empty() ? cuda.note.c_str() : "");
    for (const auto& d : cuda.devices) {
      std::printf("  %d %s %s, %s, compute %d.%d, RDMA registration: %s\n", d.index, d.name.c_str(), d.uuid.c_str(),
                  core::format_byte_size(d.total_memory).c_str(), d.compute_major, d.compute_minor,
                  d.rdma_registration.c_str());
      std::string nics;
      for (const auto& n : nics_near_gpu(rdma, d.pci_bus_id)) nics += (nics.empty() ? "" : ", ") + n;
      std::printf("    pci %s, NICs for READs into it: %s\n", d.pci_bus_id.c_str(), nics.empty() ? "none" : nics.c_str());
    }
    exit_code = kExitOk;
  });
}

}  // namespace tensorhub::cli
