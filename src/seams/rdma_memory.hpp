// What the RDMA transport (rdma_transport.hpp) asks of the peer, and what
// it tells of itself: free of verbs types, so the engine builds without
// them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "seams/dma_buf.hpp"
#include "swarm/swarm_messages.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::peer {

// A version's memory for registration, and what keeps it from being
// released while it is registered off the I/O thread (drop `keep` on any
// thread). Host memory is registered by address; GPU memory by address
// (nvidia_peermem) or through one dma-buf per region.
struct HeldRegions {
  std::vector<std::span<std::byte>> regions;
  std::shared_ptr<void> keep;
  // Set: the regions are registered through the dma-bufs it appends, one
  // per region in order. Called off the I/O thread (an export per region:
  // a model's thousand tensors take a while); its error refuses the
  // registration.
  std::function<Status(std::vector<DmaBuf>&)> make_dma_bufs;
  // Memory of a PCI device (a GPU): its bus id as sysfs names it
  // ("0000:17:00.0"), so READs into it take the NICs nearest it. Empty:
  // host memory (its pages' NUMA node decides).
  std::string pci_bus_id;
};

// What the RDMA transport asks of the peer about versions' memory.
class RdmaMemory {
 public:
  virtual ~RdmaMemory() = default;
  // The memory of `version` as this peer serves it; nothing when it holds
  // no such version, does not serve it, or keeps it where the NICs cannot
  // reach (GPU memory that exports no dma-buf).
  virtual std::optional<HeldRegions> served_regions(const ManifestId& version_id) = 0;
  // The memory a fetch of `version` lands in; nothing as above.
  virtual std::optional<HeldRegions> landing_regions(const ManifestId& version_id) = 0;
  // Where the READs of the piece `header` from `peer` land: as
  // TransportEvents::piece_destination, except that they land straight in
  // the version's memory (landing_regions) even where TCP payloads go
  // through a staging buffer (GPU memory). Empty: the peer does not want
  // the piece.
  virtual void read_destination(const PeerId& peer, const swarm::SwarmMessage& header,
                                std::vector<std::span<std::byte>>& out) = 0;
  // Runs `job` off the I/O thread (registering tens of GB pins them: seconds).
  virtual void run_off_thread(std::function<void()> job) = 0;
};

// What status shows of the transport.
struct RdmaStatus {
  struct Nic {
    std::string name;
    bool preferred = false;      // blocks are striped over the preferred NICs
    std::uint64_t bytes_read = 0;
  };
  std::vector<Nic> nics;
  struct Neighbour {
    PeerId peer;
    std::string state;  // "reading", "connecting", "tcp (why)"
    std::uint64_t reads = 0, bytes = 0, failed_reads = 0;
    std::size_t grants = 0;  // its versions this peer may READ
  };
  std::vector<Neighbour> neighbours;
  std::uint64_t grants_given = 0;
  // Since start, over every neighbour (those gone too).
  std::uint64_t reads = 0, bytes_read = 0, failed_reads = 0;
};

}  // namespace tensorhub::peer
