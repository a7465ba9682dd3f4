// Payloads being received for versions whose memory a payload is not read
// straight into (MemoryDomain::receives_in_place() false: GPU memory, an
// output file), by (sender, request id). Each is read into a buffer of the
// version's payload stage (a staging ring) or, when it has none or none is
// free, into a host buffer, later written through the domain. Host buffers
// of payloads that ended are kept for the next ones (still in cache), up
// to kSpareBuffers. Only the I/O thread calls these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "peer/local_version.hpp"
#include "seams/payload_stage.hpp"
#include "swarm/request_ids.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::peer {

class StagedPayloads {
 public:
  static constexpr std::size_t kSpareBuffers = 16;

  struct Payload {
    std::shared_ptr<LocalVersion> version;
    std::uint64_t offset = 0;  // in the version's image
    std::uint32_t length = 0;
    PayloadStage* stage = nullptr;  // null: `host` holds the payload
    std::span<std::byte> buffer;    // where it is read: the stage's buffer, or `host`
    std::vector<std::byte> host;
  };

  StagedPayloads() = default;
  StagedPayloads(const StagedPayloads&) = delete;
  StagedPayloads& operator=(const StagedPayloads&) = delete;

  // The payload answering `request_id` of `peer`, `length` bytes at
  // `offset` of `version`, begins: where its bytes go. One that began
  // before under the same key gives its buffer back.
  std::span<std::byte> begin(const PeerId& peer, swarm::RequestId request_id, std::shared_ptr<LocalVersion> version,
                             std::uint64_t offset, std::uint32_t length);
  // The payload under that key ends: taken out (its buffer is the caller's
  // to land or give back; a host buffer goes back with give_back_host).
  std::optional<Payload> end(const PeerId& peer, swarm::RequestId request_id);
  // Keeps a host buffer for the next payload.
  void give_back_host(std::vector<std::byte> host);
  // The connection to `peer` went: its payloads' buffers go back.
  void drop_from(const PeerId& peer);
  // Every payload's buffer goes back (the engine closes; its stages outlive this call).
  void clear();
  // Payloads read into a host buffer (no stage, or no free stage buffer).
  std::uint64_t through_host() const { return through_host_; }

 private:
  void give_back(Payload& p);

  std::map<std::pair<PeerId, swarm::RequestId>, Payload> receiving_;
  std::vector<std::vector<std::byte>> spare_;
  std::uint64_t through_host_ = 0;
};

}  // namespace tensorhub::peer
