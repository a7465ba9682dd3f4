// How a GPU's memory would be registered for RDMA, probed at start: the
// first rung of the ladder that this machine offers.
//   dma-buf   the GPU exports its memory as a dma-buf (CUDA attribute 124)
//             and the NIC registers that (ibv_reg_dmabuf_mr)
//   peermem   the nvidia_peermem module lets ibv_reg_mr take device pointers
//   staging   neither: the version's payloads move over TCP, through the
//             pinned staging ring
// Pure, so the choice is tested with any inputs; a GPU's DeviceApi answers
// it (rdma_registration), and the peer registers its versions accordingly.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace tensorhub::cuda {

std::string_view choose_rdma_registration(bool dma_buf_supported, bool peermem_loaded);
// Whether <sysfs_root>/module/nvidia_peermem exists.
bool peermem_loaded(const std::string& sysfs_root = "/sys");
// "GPU-" and the 16 UUID bytes as nvidia-smi -L prints them (8-4-4-4-12).
std::string gpu_uuid_text(const std::array<unsigned char, 16>& bytes);

}  // namespace tensorhub::cuda
