// A ring of page-locked host slots through which bytes reach GPU memory
// when the NIC cannot write there itself (TCP, or RDMA without GPUDirect):
// a receiver fills a slot, submits it with the image range it holds, and
// the ring copies it to the range's final place in device memory with
// asynchronous copies (the stream chosen by the range's place, so landings
// of one range stay in order). The pinned memory is
// allocated once, when the ring is made (tens of MiB a GPU); the fetching
// side holds no other host image of the version.
//
// Invariant: a slot is handed out again only after every copy out of it
// has ended (its ticket is done or failed), so no copy ever reads bytes of
// a later submission.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/regions.hpp"
#include "cuda/device_api.hpp"
#include "seams/payload_stage.hpp"

namespace tensorhub::cuda {

class StagingRing final : public peer::PayloadStage {
 public:
  struct Options {
    std::size_t slot_bytes = std::size_t{4} << 20;
    std::size_t slots = 16;
  };

  // Errors: kInvalidArgument for zero slots or slot bytes; kUnavailable when
  // the pinned memory cannot be had.
  static Status create(DeviceApi& device, Options options, std::unique_ptr<StagingRing>& out);
  // Waits for the copies in flight, then frees the pinned memory.
  ~StagingRing() override;
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // A free slot (the whole of it), or an empty span when every slot is
  // handed out or in flight (poll() frees slots whose copies ended) or
  // `length` is larger than a slot.
  std::span<std::byte> take(std::uint64_t length) override;
  void give_back(std::span<std::byte> slot) override;
  // Copies the slot's first `length` bytes to bytes [offset, offset +
  // length) of `destination` (device memory laid out as regions; the range
  // may span several), on stream (offset / slot size) % streams. `tag`
  // comes back in Landed. On an error the slot is free again and nothing is
  // in flight for it.
  // REQUIRES: `slot` came from take() and was not landed since;
  // length <= slot size; offset + length <= destination.size();
  // `destination` stays valid until the landing is reported.
  // Errors: kUnavailable when the device refuses a copy.
  Status land(std::span<std::byte> slot, const core::MutableRegions& destination, std::uint64_t offset,
              std::uint64_t length, std::uint64_t tag) override;
  // Copies bytes [offset, offset + length) of `source` (device memory laid
  // out as regions) into the slot, on the range's stream; poll() reports
  // `tag` and the slot stays the caller's until give_back(). On an error
  // nothing is in flight for the slot, which is still the caller's.
  // REQUIRES: as land(), with `source` for `destination`.
  // Errors: kUnavailable when the device refuses a copy.
  Status fill(std::span<std::byte> slot, const core::ConstRegions& source, std::uint64_t offset,
              std::uint64_t length, std::uint64_t tag) override;
  // Appends the copies that ended since the last call, and frees the slots
  // of landings. Never blocks.
  void poll(std::vector<Landed>& out) override;
  void drain() override;

  std::size_t slot_bytes() const { return options_.slot_bytes; }
  std::size_t slot_count() const { return options_.slots; }
  std::size_t in_flight() const override { return in_flight_; }

 private:
  struct Slot {
    std::byte* memory = nullptr;
    bool busy = false;  // handed out or in flight
    bool landing = false;  // copies in flight
    bool keep = false;     // a fill: the slot stays taken after its copies
    Ticket ticket;
    Landed landed;
  };
  StagingRing(DeviceApi& device, Options options, std::byte* pinned);
  Slot* slot_of(std::span<std::byte> slot);
  // land() with `device` mutable (slot to device), fill() with it const
  // (device to slot).
  template <typename Regions>
  Status copy_between(std::span<std::byte> slot, const Regions& device, std::uint64_t offset, std::uint64_t length,
                      std::uint64_t tag, bool keep);
  // Runs `copies` (enqueuing on the stream it is given) and records the
  // slot's ticket.
  Status enqueue(Slot& s, std::uint64_t offset, std::uint64_t length, std::uint64_t tag, bool keep,
                 const std::function<Status(int stream)>& copies);

  DeviceApi& device_;
  Options options_;
  std::byte* pinned_;
  std::vector<Slot> slots_;
  std::size_t next_ = 0;       // where take() starts looking
  std::size_t in_flight_ = 0;  // landing, not yet polled
};

}  // namespace tensorhub::cuda
