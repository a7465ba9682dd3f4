#include "rdma/verbs_nic.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tensorhub::rdma {
namespace {

constexpr int kCqEntries = 4096;

Status device_error(const std::string& device, const char* step) {
  return Status::unavailable(device + ": " + step + " failed: " + std::strerror(errno));
}

}  // namespace

MemoryRegistration& MemoryRegistration::operator=(MemoryRegistration&& other) noexcept {
  if (this != &other) {
    reset();
    mr_ = std::exchange(other.mr_, nullptr);
  }
  return *this;
}

void MemoryRegistration::reset() {
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
  mr_ = nullptr;
}

std::vector<std::unique_ptr<VerbsNic>> VerbsNic::open_active(std::string& note) {
  std::vector<std::unique_ptr<VerbsNic>> out;
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr) {
    note = "no RDMA subsystem";
    return out;
  }
  for (int i = 0; i < count; ++i) {
    auto nic = open(list[i]);
    if (!nic) {
      note = nic.status().message();
      continue;
    }
    if ((*nic)->port_active()) out.push_back(std::move(*nic));
  }
  ibv_free_device_list(list);
  if (out.empty() && note.empty()) note = count == 0 ? "no RDMA device" : "no RDMA device with an active port";
  return out;
}

Result<std::unique_ptr<VerbsNic>> VerbsNic::open(ibv_device* device) {
  std::unique_ptr<VerbsNic> nic(new VerbsNic);
  nic->name_ = ibv_get_device_name(device);
  nic->context_ = ibv_open_device(device);
  if (nic->context_ == nullptr) return device_error(nic->name_, "opening the device");
  ibv_device_attr attr{};
  if (int rc = ibv_query_device(nic->context_, &attr); rc != 0) {
    errno = rc;
    return device_error(nic->name_, "querying the device");
  }
  ibv_port_attr port{};
  if (int rc = ibv_query_port(nic->context_, 1, &port); rc != 0) {
    errno = rc;
    return device_error(nic->name_, "querying port 1");
  }
  ibv_gid gid{};
  if (int rc = ibv_query_gid(nic->context_, 1, 0, &gid); rc != 0) {
    errno = rc;
    return device_error(nic->name_, "reading GID 0");
  }
  std::copy(std::begin(gid.raw), std::end(gid.raw), nic->offered_.gid.begin());
  nic->offered_.mtu = static_cast<std::uint8_t>(port.active_mtu);
  nic->offered_.responder_depth = static_cast<std::uint8_t>(std::clamp(attr.max_qp_rd_atom, 0, 255));
  nic->offered_.requester_depth = static_cast<std::uint8_t>(std::clamp(attr.max_qp_init_rd_atom, 0, 255));
  nic->max_sge_ = static_cast<std::uint32_t>(std::clamp(attr.max_sge, 1, 30));
  nic->pd_ = ibv_alloc_pd(nic->context_);
  if (nic->pd_ == nullptr) return device_error(nic->name_, "allocating a protection domain");
  nic->channel_ = ibv_create_comp_channel(nic->context_);
  if (nic->channel_ == nullptr) return device_error(nic->name_, "creating a completion channel");
  const int flags = fcntl(nic->channel_->fd, F_GETFL);
  if (flags < 0 || fcntl(nic->channel_->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return device_error(nic->name_, "making the completion channel non-blocking");
  }
  nic->cq_ = ibv_create_cq(nic->context_, std::min(kCqEntries, attr.max_cqe), nullptr, nic->channel_, 0);
  if (nic->cq_ == nullptr) return device_error(nic->name_, "creating a completion queue");
  if (int rc = ibv_req_notify_cq(nic->cq_, 0); rc != 0) {
    errno = rc;
    return device_error(nic->name_, "arming the completion queue");
  }
  return nic;
}

VerbsNic::~VerbsNic() {
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
  if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
  if (context_ != nullptr) ibv_close_device(context_);
}

bool VerbsNic::port_active() const {
  ibv_port_attr port{};
  return ibv_query_port(context_, 1, &port) == 0 && port.state == IBV_PORT_ACTIVE;
}

unsigned VerbsNic::access_flags(Access access) const {
  if (access == Access::kLocalWrite) return IBV_ACCESS_LOCAL_WRITE;
  return relaxed_ordering_ ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_RELAXED_ORDERING : IBV_ACCESS_REMOTE_READ;
}

Result<MemoryRegistration> VerbsNic::register_memory(void* data, std::size_t size, Access access) {
  ibv_mr* mr = ibv_reg_mr_iova2(pd_, data, size, reinterpret_cast<std::uintptr_t>(data), access_flags(access));
  if (mr == nullptr) return device_error(name_, "registering memory");
  return MemoryRegistration(mr);
}

Result<MemoryRegistration> VerbsNic::register_dma_buf(const peer::DmaBuf& buf, std::size_t size, std::uintptr_t iova,
                                                      Access access) {
  ibv_mr* mr = ibv_reg_dmabuf_mr(pd_, buf.offset(), size, iova, buf.fd(), static_cast<int>(access_flags(access)));
  if (mr == nullptr) return device_error(name_, "registering a dma-buf");
  return MemoryRegistration(mr);
}

void VerbsNic::drain(std::vector<ibv_wc>& out) {
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  unsigned events = 0;
  while (ibv_get_cq_event(channel_, &cq, &context) == 0) ++events;
  if (events > 0) ibv_ack_cq_events(cq_, events);
  ibv_req_notify_cq(cq_, 0);
  // Completions that came before the re-arm fire no event: poll them now.
  ibv_wc batch[32];
  for (;;) {
    const int n = ibv_poll_cq(cq_, 32, batch);
    if (n <= 0) break;
    out.insert(out.end(), batch, batch + n);
  }
}

}  // namespace tensorhub::rdma
