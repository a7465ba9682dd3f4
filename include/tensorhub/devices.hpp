// Discovery of the optional hardware: RDMA NICs and CUDA GPUs.
//
// Both lists are empty, not errors, when the build lacks the part or the
// machine lacks the device; `built` says which of the two it is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tensorhub {

struct RdmaPortInfo {
  std::uint8_t port = 0;
  std::string state;        // "active", "down", ...
  std::string link_layer;   // "InfiniBand" or "Ethernet" (RoCE)
  std::uint32_t active_mtu = 0;
  std::string gid;          // GID index 0, as 8 groups of 4 hex digits: what queue pairs connect to
};

struct RdmaDeviceInfo {
  std::string name;         // e.g. mlx5_0
  std::string node_guid;    // hex
  int numa_node = -1;       // from sysfs; -1: unknown
  std::vector<RdmaPortInfo> ports;
};

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  std::string uuid;  // "GPU-..." as nvidia-smi -L prints it: how fetches name a GPU
  std::string pci_bus_id;  // "0000:17:00.0", as sysfs names it
  std::uint64_t total_memory = 0;
  int compute_major = 0, compute_minor = 0;
  bool gpudirect_rdma = false;  // CUDA's GPUDirect RDMA attribute
  bool dma_buf = false;         // its memory can be exported as a dma-buf
  bool peermem = false;         // the nvidia_peermem module is loaded
  std::string rdma_registration;  // "dma-buf", "peermem" or "staging": the first the machine offers
};

struct RdmaDevices {
  bool built = false;      // compiled with TENSORHUB_RDMA
  std::string note;        // why the list is empty, when it is
  std::vector<RdmaDeviceInfo> devices;
};

struct CudaDevices {
  bool built = false;      // compiled with TENSORHUB_CUDA
  std::string note;
  std::vector<CudaDeviceInfo> devices;
};

RdmaDevices list_rdma_devices();
CudaDevices list_cuda_devices();
// The NICs of `nics` that READs into the GPU at `pci_bus_id` use: those on
// its NUMA node nearest to it on the PCIe tree (ties all), from sysfs
// under `sysfs_root`. Empty when there is no NIC or the GPU is not found.
std::vector<std::string> nics_near_gpu(const RdmaDevices& nics, const std::string& pci_bus_id,
                                       const std::string& sysfs_root = "/sys");

}  // namespace tensorhub
