// A dma-buf: how a NIC registers memory the host cannot address (GPU memory,
// GPUDirect RDMA). The file descriptor stands for a range of device memory;
// `offset` is where the region it was made for begins in it. Copies share
// the descriptor, closed when the last one goes (a NIC keeps its own
// reference once it has registered the range). Plain C++17: CUDA sources
// include it.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <memory>

namespace tensorhub::peer {

class DmaBuf {
 public:
  DmaBuf() = default;
  // Takes `fd` over.
  DmaBuf(int fd, std::uint64_t offset)
      : fd_(new int(fd), [](const int* f) {
          ::close(*f);
          delete f;
        }),
        offset_(offset) {}

  bool valid() const { return fd_ != nullptr; }
  int fd() const { return fd_ ? *fd_ : -1; }
  std::uint64_t offset() const { return offset_; }

 private:
  std::shared_ptr<const int> fd_;
  std::uint64_t offset_ = 0;
};

}  // namespace tensorhub::peer
