#include "cuda/staging_ring.hpp"

#include <cassert>
#include <functional>
#include <type_traits>

namespace tensorhub::cuda {

Status StagingRing::create(DeviceApi& device, Options options, std::unique_ptr<StagingRing>& out) {
  if (options.slots == 0 || options.slot_bytes == 0) {
    return Status::invalid_argument("a staging ring needs at least one slot of at least one byte");
  }
  if (options.slot_bytes > SIZE_MAX / options.slots) return Status::invalid_argument("staging ring too large");
  std::byte* pinned = nullptr;
  if (Status s = device.allocate_pinned(options.slot_bytes * options.slots, pinned); !s) {
    return Status::unavailable("staging ring of " + std::to_string(options.slots) + " x " +
                               std::to_string(options.slot_bytes) + " bytes: " + s.message());
  }
  out.reset(new StagingRing(device, options, pinned));
  return Status::ok();
}

StagingRing::StagingRing(DeviceApi& device, Options options, std::byte* pinned)
    : device_(device), options_(options), pinned_(pinned), slots_(options.slots) {
  for (std::size_t i = 0; i < slots_.size(); ++i) slots_[i].memory = pinned_ + i * options_.slot_bytes;
}

StagingRing::~StagingRing() {
  drain();
  for (Slot& s : slots_) {
    if (s.landing) device_.release(s.ticket);
  }
  device_.free_pinned(pinned_);
}

void StagingRing::drain() {
  for (Slot& s : slots_) {
    if (s.landing) device_.wait(s.ticket);
  }
}

std::span<std::byte> StagingRing::take(std::uint64_t length) {
  if (length > options_.slot_bytes) return {};
  for (std::size_t k = 0; k < slots_.size(); ++k) {
    const std::size_t i = (next_ + k) % slots_.size();
    if (slots_[i].busy) continue;
    slots_[i].busy = true;
    next_ = (i + 1) % slots_.size();
    return {slots_[i].memory, options_.slot_bytes};
  }
  return {};
}

StagingRing::Slot* StagingRing::slot_of(std::span<std::byte> slot) {
  if (slot.data() < pinned_) return nullptr;
  const std::size_t at = static_cast<std::size_t>(slot.data() - pinned_);
  if (at % options_.slot_bytes != 0 || at / options_.slot_bytes >= slots_.size()) return nullptr;
  return &slots_[at / options_.slot_bytes];
}

void StagingRing::give_back(std::span<std::byte> slot) {
  Slot* s = slot_of(slot);
  assert(s != nullptr && s->busy && !s->landing);
  if (s != nullptr && !s->landing) s->busy = false;
}

Status StagingRing::land(std::span<std::byte> slot, const core::MutableRegions& destination, std::uint64_t offset,
                         std::uint64_t length, std::uint64_t tag) {
  return copy_between(slot, destination, offset, length, tag, false);
}

Status StagingRing::fill(std::span<std::byte> slot, const core::ConstRegions& source, std::uint64_t offset,
                         std::uint64_t length, std::uint64_t tag) {
  return copy_between(slot, source, offset, length, tag, true);
}

template <typename Regions>
Status StagingRing::copy_between(std::span<std::byte> slot, const Regions& device, std::uint64_t offset,
                                 std::uint64_t length, std::uint64_t tag, bool keep) {
  Slot* s = slot_of(slot);
  assert(s != nullptr && s->busy && !s->landing);
  assert(length <= options_.slot_bytes && offset + length <= device.size());
  if (s == nullptr) return Status::internal("a copy through a span that is no slot of this ring");
  return enqueue(*s, offset, length, tag, keep, [&](int stream) {
    Status status;
    std::uint64_t at = 0;
    device.for_each(offset, length, [&](auto piece) {
      if (!status) return;
      if constexpr (std::is_const_v<typename decltype(piece)::element_type>) {  // device to slot
        status = device_.copy_async(CopyDirection::kDeviceToHost, s->memory + at, piece.data(), piece.size(), stream);
      } else {  // slot to device
        status = device_.copy_async(CopyDirection::kHostToDevice, piece.data(), s->memory + at, piece.size(), stream);
      }
      at += piece.size();
    });
    return status;
  });
}

Status StagingRing::enqueue(Slot& s, std::uint64_t offset, std::uint64_t length, std::uint64_t tag, bool keep,
                            const std::function<Status(int stream)>& copies) {
  // One range always takes one stream: its copies stay in order.
  const int stream = static_cast<int>((offset / options_.slot_bytes) % static_cast<std::uint64_t>(device_.stream_count()));
  Status status = copies(stream);
  if (status) status = device_.record(stream, s.ticket);
  if (!status) {
    // Copies already enqueued still use the slot: wait for them before it
    // is handed out again.
    Ticket drain;
    if (device_.record(stream, drain)) {
      device_.wait(drain);
      device_.release(drain);
    }
    if (!keep) s.busy = false;
    return status;
  }
  s.landing = true;
  s.keep = keep;
  s.landed = Landed{tag, offset, length, false};
  ++in_flight_;
  return Status::ok();
}

void StagingRing::poll(std::vector<Landed>& out) {
  for (Slot& s : slots_) {
    if (!s.landing) continue;
    const TicketState state = device_.query(s.ticket);
    if (state == TicketState::kPending) continue;
    device_.release(s.ticket);
    s.landed.ok = state == TicketState::kDone;
    out.push_back(s.landed);
    s.landing = false;
    s.busy = s.keep;  // a filled slot stays its taker's until give_back()
    --in_flight_;
  }
}

}  // namespace tensorhub::cuda
