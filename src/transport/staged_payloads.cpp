#include "transport/staged_payloads.hpp"

namespace tensorhub::peer {

std::span<std::byte> StagedPayloads::begin(const PeerId& peer, swarm::RequestId request_id,
                                           std::shared_ptr<LocalVersion> version, std::uint64_t offset,
                                           std::uint32_t length) {
  Payload& p = receiving_[{peer, request_id}];
  give_back(p);  // a payload of that request began before
  p = Payload{};
  p.version = std::move(version);
  p.offset = offset;
  p.length = length;
  p.stage = p.version->domain->payload_stage();
  if (p.stage != nullptr) p.buffer = p.stage->take(length);
  if (p.buffer.empty()) {
    // No stage, or every buffer busy: a host buffer, written through the
    // domain when the payload is in.
    p.stage = nullptr;
    if (!spare_.empty()) {
      p.host = std::move(spare_.back());
      spare_.pop_back();
    }
    p.host.resize(length);
    p.buffer = p.host;
    ++through_host_;
  }
  return p.buffer.first(length);
}

std::optional<StagedPayloads::Payload> StagedPayloads::end(const PeerId& peer, swarm::RequestId request_id) {
  auto it = receiving_.find({peer, request_id});
  if (it == receiving_.end()) return std::nullopt;
  Payload p = std::move(it->second);
  receiving_.erase(it);
  return p;
}

void StagedPayloads::give_back_host(std::vector<std::byte> host) {
  if (host.empty() || spare_.size() >= kSpareBuffers) return;
  spare_.push_back(std::move(host));
}

void StagedPayloads::give_back(Payload& p) {
  if (p.stage != nullptr) p.stage->give_back(p.buffer);
  p.stage = nullptr;
  p.buffer = {};
  give_back_host(std::move(p.host));
}

void StagedPayloads::drop_from(const PeerId& peer) {
  for (auto it = receiving_.lower_bound({peer, swarm::RequestId{}}); it != receiving_.end() && it->first.first == peer;) {
    give_back(it->second);
    it = receiving_.erase(it);
  }
}

void StagedPayloads::clear() {
  for (auto& [key, p] : receiving_) {
    if (p.stage != nullptr) p.stage->give_back(p.buffer);
  }
  receiving_.clear();
}

}  // namespace tensorhub::peer
