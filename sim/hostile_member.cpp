#include "sim/hostile_member.hpp"
#include "core/key_derivation.hpp"

#include <memory>

namespace tensorhub::sim {

using gossip::Liveness;
using gossip::OutgoingItem;
using gossip::Packet;
using gossip::PacketKind;

namespace {
constexpr std::uint64_t kSybilKeyBase = 1'000'000'000;
}

HostileMember::HostileMember(GossipNetwork& net, std::size_t self, std::uint64_t seed)
    : net_(net),
      self_(self),
      member_(GossipNetwork::identity_for(net.key_index(self))),
      forger_(kSybilKeyBase + net.key_index(self), 1),
      rng_(seed) {}

std::optional<std::size_t> HostileMember::random_live_peer(std::optional<std::size_t> other_than) {
  for (int tries = 0; tries < 64; ++tries) {
    const std::size_t p = rng_.below(net_.size());
    if (p != self_ && p != other_than && net_.is_up(p)) return p;
  }
  return std::nullopt;
}

void HostileMember::send(std::size_t to, Packet packet, std::span<const OutgoingItem> items,
                         std::optional<PeerId> pose_as, std::optional<std::uint64_t> boot_id) {
  net_.inject_datagram(to, net_.address(self_), forger_.seal(net_.id(to), std::move(packet), items, pose_as, boot_id));
  ++sent_;
}

void HostileMember::round(std::size_t receivers) {
  for (std::size_t n = 0; n < receivers; ++n) {
    const auto to = random_live_peer();
    const auto victim = to ? random_live_peer(to) : std::nullopt;
    const auto witness = victim ? random_live_peer(victim) : std::nullopt;
    if (!to || !victim || !witness || *witness == *to) continue;
    const PeerId& v = net_.id(*victim);
    const std::uint64_t inc = net_.core(*victim).self_record()->record.incarnation;
    Packet gossip;
    gossip.kind = PacketKind::kGossip;

    // Poison the victim's replay window at the receiver.
    send(*to, gossip, {}, v, UINT64_MAX);

    // Claims: above any signed incarnation; in another member's name; a
    // death in its own name at the true incarnation.
    std::vector<OutgoingItem> claims;
    claims.push_back(gossip::sign_liveness(member_, Liveness::kDead, v, UINT64_MAX));
    claims.push_back(gossip::sign_liveness(member_, Liveness::kSuspect, v, inc + 1));
    gossip::LivenessItem in_witness_name = gossip::sign_liveness(member_, Liveness::kSuspect, v, inc);
    in_witness_name.from = net_.id(*witness);
    claims.push_back(in_witness_name);
    claims.push_back(gossip::sign_liveness(member_, Liveness::kDead, v, inc));
    send(*to, gossip, claims);

    // Record bytes that peek as the receiver's own record at 2^64-1.
    gossip::PeerRecord fake = net_.core(*to).self_record()->record;
    fake.id = member_.public_key();
    fake.incarnation = UINT64_MAX;
    if (auto signed_fake = gossip::sign_record(fake, member_); signed_fake.is_ok()) {
      auto posing = std::make_shared<gossip::SignedRecord>(**signed_fake);
      std::copy(net_.id(*to).bytes.begin(), net_.id(*to).bytes.end(), posing->encoded.begin() + 4);
      posing->record.id = net_.id(*to);
      const std::vector<OutgoingItem> record_item = {gossip::RecordPtr(posing)};
      send(*to, gossip, record_item);
    }

    // Acks and nacks for probes it was never asked about, as itself and
    // posing as the victim; a ping-req posing as the witness.
    for (PacketKind kind : {PacketKind::kAck, PacketKind::kNack}) {
      Packet p;
      p.kind = kind;
      p.probe_seq = static_cast<std::uint32_t>(rng_.next());
      send(*to, p, {});
      p.probe_seq = static_cast<std::uint32_t>(rng_.next());
      send(*to, p, {}, v);
    }
    Packet ping_req;
    ping_req.kind = PacketKind::kPingReq;
    ping_req.probe_seq = static_cast<std::uint32_t>(rng_.next());
    ping_req.target = v;
    ping_req.target_addr = net_.address(*victim);
    send(*to, ping_req, {}, net_.id(*witness));
  }
}

void HostileMember::sniff() {
  const core::AeadKey key = core::derive_subkey(GossipNetwork::members_key(), "gossip");
  net_.on_datagram([this, key](std::size_t from, std::size_t, const std::vector<std::uint8_t>& bytes) {
    gossip::Opened opened;
    if (gossip::open_datagram(key, bytes, opened) != gossip::OpenError::kNone) return;
    Packet packet;
    std::vector<gossip::IncomingItem> items;
    if (!gossip::decode_packet(opened.plaintext, packet, items).is_ok()) return;
    if (packet.kind != PacketKind::kPing && packet.kind != PacketKind::kPingReq) return;
    auto& seqs = probe_seqs_[from];
    seqs.push_back(packet.probe_seq);
    if (seqs.size() > 8) seqs.pop_front();
  });
}

void HostileMember::ack_for(std::size_t crashed, std::size_t per_peer) {
  for (std::size_t to = 0; to < net_.size(); ++to) {
    if (to == self_ || to == crashed || !net_.is_up(to)) continue;
    std::vector<std::uint32_t> seqs;
    if (auto it = probe_seqs_.find(to); it != probe_seqs_.end()) seqs.assign(it->second.begin(), it->second.end());
    while (seqs.size() < per_peer) seqs.push_back(static_cast<std::uint32_t>(rng_.next()));
    for (std::uint32_t seq : seqs) {
      Packet ack;
      ack.kind = PacketKind::kAck;
      ack.probe_seq = seq;
      send(to, ack, {}, net_.id(crashed));
      send(to, ack, {});
    }
  }
}

}  // namespace tensorhub::sim
