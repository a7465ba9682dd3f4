// Where received payloads wait before they reach memory that the network
// cannot write (GPU memory without GPUDirect): the transport receives a
// payload into a buffer the stage lends, and the stage moves it to its
// final place asynchronously, reporting when it is there. The other way,
// a piece served from such memory is filled into a buffer first. A memory domain
// names its stage (MemoryDomain::payload_stage); host memory has none, the
// transport receiving straight into it.
//
// Called from the driver's thread only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/regions.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::peer {

class PayloadStage {
 public:
  // A landing that ended: `ok` false when its bytes could not be moved (the
  // range of the destination then holds unknown bytes).
  struct Landed {
    std::uint64_t tag = 0;
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    bool ok = false;
  };

  virtual ~PayloadStage() = default;
  // A buffer for a payload of `length` bytes; empty when none is free now
  // or `length` is larger than a buffer.
  virtual std::span<std::byte> take(std::uint64_t length) = 0;
  // Returns a buffer from take() unused.
  virtual void give_back(std::span<std::byte> buffer) = 0;
  // Moves the buffer's first `length` bytes to [offset, offset + length) of
  // `destination`; poll() reports `tag` once they are there, and the buffer
  // is the stage's again. Landings of one destination range happen in the
  // order they were asked for.
  // REQUIRES: `buffer` came from take(); `destination` stays valid until
  // the landing is reported.
  // Errors: kUnavailable (the move was refused; the buffer is free again).
  virtual Status land(std::span<std::byte> buffer, const core::MutableRegions& destination, std::uint64_t offset,
                      std::uint64_t length, std::uint64_t tag) = 0;
  // Copies bytes [offset, offset + length) of `source` into `buffer` (a
  // piece served from memory the host cannot read); poll() reports `tag`
  // once they are there, and the buffer stays the caller's until
  // give_back(). REQUIRES: as land(), with `source` for `destination`.
  // Errors: kUnavailable (the copy was refused; the buffer is still the caller's).
  virtual Status fill(std::span<std::byte> buffer, const core::ConstRegions& source, std::uint64_t offset,
                      std::uint64_t length, std::uint64_t tag) = 0;
  // Appends the landings and fills that ended since the last call. Never blocks.
  virtual void poll(std::vector<Landed>& out) = 0;
  // Blocks until every landing and fill asked for has ended (poll() then reports them).
  virtual void drain() = 0;
  virtual std::size_t in_flight() const = 0;
};

}  // namespace tensorhub::peer
