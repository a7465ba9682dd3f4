#include "support/fake_device.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace tensorhub::testing {

FakeDevice::~FakeDevice() {
  for (auto& [p, n] : pinned_) delete[] p;
  for (auto& [p, n] : device_) {
    if (!in_arena(p)) delete[] p;
  }
  if (arena_ != nullptr) ::munmap(arena_, kArenaBytes);
  if (arena_fd_ >= 0) ::close(arena_fd_);
}

void FakeDevice::back_with_memfd() {
  std::lock_guard lock(mutex_);
  if (arena_ != nullptr) return;
  arena_fd_ = ::memfd_create("fake-device", MFD_CLOEXEC);
  if (arena_fd_ < 0 || ::ftruncate(arena_fd_, static_cast<off_t>(kArenaBytes)) != 0) return;
  void* p = ::mmap(nullptr, kArenaBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, arena_fd_, 0);
  if (p != MAP_FAILED) arena_ = static_cast<std::byte*>(p);
}

std::string FakeDevice::rdma_registration() const {
  std::lock_guard lock(mutex_);
  if (!rdma_registration_.empty()) return rdma_registration_;
  return arena_ != nullptr ? "dma-buf" : "staging";
}

Status FakeDevice::export_dma_buf(const std::byte* device, std::size_t bytes, peer::DmaBuf& out) {
  std::lock_guard lock(mutex_);
  if (!inside(device_, device, bytes)) return Status::invalid_argument("not device memory of the fake");
  if (!in_arena(device)) return Status::unavailable("the fake exports dma-bufs of memfd-backed memory only");
  const int fd = ::fcntl(arena_fd_, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return Status::unavailable("dup of the fake's memfd failed");
  out = peer::DmaBuf(fd, static_cast<std::uint64_t>(device - arena_));
  ++dma_bufs_exported_;
  return Status::ok();
}

Status FakeDevice::allocate_pinned(std::size_t bytes, std::byte*& out) {
  std::lock_guard lock(mutex_);
  if (lost_) return Status::unavailable("fake device lost");
  if (bytes > pinned_limit_ - std::min(pinned_limit_, pinned_bytes_)) {
    return Status::unavailable("out of pinned memory");
  }
  out = new std::byte[bytes];
  pinned_[out] = bytes;
  pinned_bytes_ += bytes;
  peak_pinned_bytes_ = std::max(peak_pinned_bytes_, pinned_bytes_);
  return Status::ok();
}

void FakeDevice::free_pinned(std::byte* memory) {
  std::lock_guard lock(mutex_);
  forget(pinned_, pinned_bytes_, memory);
}

void FakeDevice::forget(Allocations& allocations, std::size_t& total, std::byte* memory) {
  auto it = allocations.find(memory);
  if (it == allocations.end()) return;
  total -= it->second;
  delete[] it->first;
  allocations.erase(it);
}

Status FakeDevice::allocate_device(std::size_t bytes, std::byte*& out) {
  std::lock_guard lock(mutex_);
  if (lost_) return Status::unavailable("fake device lost");
  if (arena_ != nullptr) {
    // Page-aligned, as a GPU's allocations are at least.
    const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 4095) & ~std::size_t{4095};
    if (rounded > kArenaBytes - arena_used_) return Status::unavailable("the fake's memfd is full");
    out = arena_ + arena_used_;
    arena_used_ += rounded;
  } else {
    out = new std::byte[bytes];
  }
  device_[out] = bytes;
  device_bytes_ += bytes;
  return Status::ok();
}

void FakeDevice::free_device(std::byte* memory) {
  std::lock_guard lock(mutex_);
  if (in_arena(memory)) {
    auto it = device_.find(memory);
    if (it == device_.end()) return;
    const std::size_t rounded = (std::max<std::size_t>(it->second, 1) + 4095) & ~std::size_t{4095};
    ::fallocate(arena_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, memory - arena_, static_cast<off_t>(rounded));
    device_bytes_ -= it->second;
    device_.erase(it);
    return;
  }
  forget(device_, device_bytes_, memory);
}

bool FakeDevice::inside(const Allocations& a, const std::byte* p, std::size_t bytes) {
  auto it = a.upper_bound(p);
  if (it == a.begin()) return false;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second;
}

Status FakeDevice::copy_async(cuda::CopyDirection direction, std::byte* to, const std::byte* from, std::size_t bytes,
                              int stream) {
  std::lock_guard lock(mutex_);
  if (lost_) return Status::unavailable("fake device lost");
  const bool to_device = direction == cuda::CopyDirection::kHostToDevice;
  const bool placed = to_device ? inside(pinned_, from, bytes) && inside(device_, to, bytes)
                                : inside(device_, from, bytes) && inside(pinned_, to, bytes);
  if (!placed) ++misplaced_copies_;
  const bool fails = std::find(fail_at_.begin(), fail_at_.end(), copies_enqueued_) != fail_at_.end();
  ++copies_enqueued_;
  streams_[static_cast<std::size_t>(stream)].ops.push_back(Op{false, 0, to, from, bytes, fails, !to_device});
  return Status::ok();
}

Status FakeDevice::record(int stream, cuda::Ticket& out) {
  std::lock_guard lock(mutex_);
  if (lost_) return Status::unavailable("fake device lost");
  out.id = next_ticket_++;
  tickets_[out.id] = cuda::TicketState::kPending;
  ticket_stream_[out.id] = stream;
  streams_[static_cast<std::size_t>(stream)].ops.push_back(Op{true, out.id, nullptr, nullptr, 0, false, false});
  return Status::ok();
}

cuda::TicketState FakeDevice::query(cuda::Ticket ticket) {
  std::lock_guard lock(mutex_);
  auto it = tickets_.find(ticket.id);
  if (it == tickets_.end()) return cuda::TicketState::kFailed;
  if (complete_on_query_) {
    const int stream = ticket_stream_[ticket.id];
    while (it->second == cuda::TicketState::kPending && step_locked(stream)) {
    }
  }
  return it->second;
}

cuda::TicketState FakeDevice::wait(cuda::Ticket ticket) {
  std::lock_guard lock(mutex_);
  auto it = tickets_.find(ticket.id);
  if (it == tickets_.end()) return cuda::TicketState::kFailed;
  const int stream = ticket_stream_[ticket.id];
  while (it->second == cuda::TicketState::kPending && step_locked(stream)) {
  }
  return it->second;
}

void FakeDevice::release(cuda::Ticket ticket) {
  std::lock_guard lock(mutex_);
  tickets_.erase(ticket.id);
  ticket_stream_.erase(ticket.id);
}

Status FakeDevice::copy(std::byte* to, const std::byte* from, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (lost_) return Status::unavailable("fake device lost");
  if (inside(device_, from, bytes) && !inside(device_, to, bytes)) bytes_to_host_ += bytes;
  std::memmove(to, from, bytes);
  return Status::ok();
}

Status FakeDevice::hash_xxh3(const cuda::xxh3::Piece* pieces, std::size_t count, std::uint8_t digest[16]) {
  std::lock_guard lock(mutex_);
  if (lost_) return Status::unavailable("fake device lost");
  std::uint64_t length = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (!inside(device_, reinterpret_cast<const std::byte*>(pieces[i].data), pieces[i].length)) ++misplaced_copies_;
    length += pieces[i].length;
  }
  const cuda::xxh3::PiecesLoader in{pieces, static_cast<int>(count)};
  cuda::xxh3::canonical(cuda::xxh3::hash(in, length), digest);
  ++hashes_;
  hashed_bytes_ += length;
  return Status::ok();
}

bool FakeDevice::step(int stream) {
  std::lock_guard lock(mutex_);
  return step_locked(stream);
}

bool FakeDevice::step_locked(int stream) {
  Stream& s = streams_[static_cast<std::size_t>(stream)];
  if (s.ops.empty()) return false;
  const Op op = s.ops.front();
  s.ops.pop_front();
  if (op.is_ticket) {
    auto it = tickets_.find(op.ticket);
    if (it != tickets_.end()) it->second = s.failed_since_ticket ? cuda::TicketState::kFailed : cuda::TicketState::kDone;
    s.failed_since_ticket = false;
  } else if (op.fails) {
    s.failed_since_ticket = true;
  } else {
    std::memcpy(op.to, op.from, op.bytes);
    ++copies_run_;
    if (op.to_host) bytes_to_host_ += op.bytes;
  }
  return true;
}

bool FakeDevice::step_any(std::mt19937_64& rng) {
  std::lock_guard lock(mutex_);
  std::vector<int> busy;
  for (std::size_t i = 0; i < streams_.size(); ++i)
    if (!streams_[i].ops.empty()) busy.push_back(static_cast<int>(i));
  if (busy.empty()) return false;
  return step_locked(busy[rng() % busy.size()]);
}

void FakeDevice::run_all() {
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < streams_.size(); ++i)
    while (step_locked(static_cast<int>(i))) {
    }
}

namespace {
constexpr std::uint8_t kFakeIpcMagic[8] = {'f', 'a', 'k', 'e', '-', 'i', 'p', 'c'};
}  // namespace

Status FakeDevice::share_ipc(const std::byte* device, std::size_t bytes, peer::SharedRange& out) {
  std::lock_guard lock(mutex_);
  auto it = device_.upper_bound(device);
  if (it == device_.begin()) return Status::invalid_argument("not device memory of the fake");
  --it;
  if (!inside(device_, device, bytes)) return Status::invalid_argument("not device memory of the fake");
  const auto base = reinterpret_cast<std::uintptr_t>(it->first);
  out.handle = {};
  std::memcpy(out.handle.data(), kFakeIpcMagic, 8);
  std::memcpy(out.handle.data() + 8, &base, sizeof base);
  out.offset = static_cast<std::uint64_t>(device - it->first);
  out.length = bytes;
  return Status::ok();
}

Status FakeDevice::open_ipc(const peer::SharedRange& range, const std::byte*& mapped) {
  std::lock_guard lock(mutex_);
  if (refuse_ipc_ || std::memcmp(range.handle.data(), kFakeIpcMagic, 8) != 0) {
    return Status::unavailable("the fake refuses this IPC handle");
  }
  std::uintptr_t base = 0;
  std::memcpy(&base, range.handle.data() + 8, sizeof base);
  auto it = device_.find(reinterpret_cast<const std::byte*>(base));
  if (it == device_.end() || range.offset > it->second || range.length > it->second - range.offset) {
    return Status::unavailable("the fake has no such allocation (freed?)");
  }
  mapped = it->first + range.offset;
  ++ipc_opened_;
  ++ipc_open_now_;
  return Status::ok();
}

void FakeDevice::close_ipc(const std::byte*) {
  std::lock_guard lock(mutex_);
  if (ipc_open_now_ > 0) --ipc_open_now_;
}

DeviceRegions::DeviceRegions(FakeDevice& device, const std::vector<std::size_t>& sizes) : device_(device) {
  for (std::size_t n : sizes) {
    std::byte* p = nullptr;
    if (!device_.allocate_device(n, p)) continue;  // the fake refuses only when lost
    regions_.push_back({p, n});
  }
}

DeviceRegions::~DeviceRegions() {
  for (std::span<std::byte> r : regions_) device_.free_device(r.data());
}

std::vector<std::byte> DeviceRegions::bytes() const {
  std::vector<std::byte> out;
  for (std::span<std::byte> r : regions_) out.insert(out.end(), r.begin(), r.end());
  return out;
}

void DeviceRegions::fill_from(const std::vector<std::byte>& bytes) {
  std::size_t at = 0;
  for (std::span<std::byte> r : regions_) {
    std::memcpy(r.data(), bytes.data() + at, r.size());
    at += r.size();
  }
}

}  // namespace tensorhub::testing
