// A ring of page-locked host slots through which bytes reach GPU memory
// when the NIC cannot write there itself (TCP, or RDMA without GPUDirect):
// a receiver fills a slot, submits it with the image range it holds, and
// the ring copies it to the range's final place in device memory with
// asynchronous copies, one stream per slot in turn. The pinned memory is
// allocated once, when the ring is made (tens of MiB a GPU); the fetching
// side holds no other host image of the version.
//
// Invariant: a slot is handed out again only after every copy out of it
// has ended (its ticket is done or failed), so no copy ever reads bytes of
// a later submission.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/regions.hpp"
#include "cuda/device_api.hpp"

namespace tensorhub::cuda {

class StagingRing {
 public:
  struct Options {
    std::size_t slot_bytes = std::size_t{4} << 20;
    std::size_t slots = 16;
  };
  // A submission whose copies ended: `ok` false when one failed (the range
  // of the destination then holds unknown bytes and must be fetched again).
  struct Landed {
    std::uint64_t tag = 0;
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    bool ok = false;
  };

  // Errors: kInvalidArgument for zero slots or slot bytes; kUnavailable when
  // the pinned memory cannot be had.
  static Status create(DeviceApi& device, Options options, std::unique_ptr<StagingRing>& out);
  // Waits for the copies in flight, then frees the pinned memory.
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // A free slot to fill, or an empty span when every slot is in flight
  // (poll() frees slots whose copies ended).
  std::span<std::byte> acquire();
  // Copies the slot's first `length` bytes to bytes [offset, offset +
  // length) of `destination` (device memory laid out as regions; the range
  // may span several). `tag` comes back in Landed. On an error the slot is
  // free again and nothing is in flight for it.
  // REQUIRES: `slot` came from acquire() and was not submitted since;
  // length <= slot size; offset + length <= destination.size();
  // `destination` stays valid until the submission has landed.
  // Errors: kUnavailable when the device refuses a copy.
  Status submit(std::span<std::byte> slot, const core::MutableRegions& destination, std::uint64_t offset,
                std::uint64_t length, std::uint64_t tag);
  // Appends the submissions that ended since the last call and frees their
  // slots. Never blocks.
  void poll(std::vector<Landed>& out);

  std::size_t slot_bytes() const { return options_.slot_bytes; }
  std::size_t slot_count() const { return options_.slots; }
  std::size_t in_flight() const { return in_flight_; }

 private:
  struct Slot {
    std::byte* memory = nullptr;
    bool busy = false;  // handed out or in flight
    bool submitted = false;
    Ticket ticket;
    Landed landed;
  };
  StagingRing(DeviceApi& device, Options options, std::byte* pinned);
  Slot* slot_of(std::span<std::byte> slot);

  DeviceApi& device_;
  Options options_;
  std::byte* pinned_;
  std::vector<Slot> slots_;
  std::size_t next_ = 0;       // where acquire() starts looking
  std::size_t in_flight_ = 0;  // submitted, not yet polled
  int next_stream_ = 0;
};

}  // namespace tensorhub::cuda
