#include "cuda/rdma_registration.hpp"

#include <cstdio>
#include <filesystem>

namespace tensorhub::cuda {

std::string_view choose_rdma_registration(bool dma_buf_supported, bool peermem) {
  if (dma_buf_supported) return "dma-buf";
  if (peermem) return "peermem";
  return "staging";
}

bool peermem_loaded(const std::string& sysfs_root) {
  std::error_code ec;
  return std::filesystem::is_directory(sysfs_root + "/module/nvidia_peermem", ec);
}

std::string gpu_uuid_text(const std::array<unsigned char, 16>& b) {
  char out[48];
  std::snprintf(out, sizeof out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return out;
}

}  // namespace tensorhub::cuda
