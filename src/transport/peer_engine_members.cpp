// PeerEngine: who the members are and where. The member list in force
// (admission control: gossip and the data plane hear only listed peers) and
// each member's data address (where connections go); the hosts of live
// members are MemberHosts'.
#include "core/host_port.hpp"
#include "core/log.hpp"
#include "transport/peer_engine.hpp"

namespace tensorhub::peer {
namespace {
constexpr const char* kLog = "peer";
}  // namespace

Result<std::shared_ptr<const gossip::GossipCore::AdmissionList>> PeerEngine::admission_list(
    const std::vector<PublicKey>& members) const {
  if (members.empty()) return std::shared_ptr<const gossip::GossipCore::AdmissionList>();
  auto list = std::make_shared<gossip::GossipCore::AdmissionList>(members.begin(), members.end());
  if (!list->count(identity_.public_key())) {
    return Status::invalid_argument("the member list does not name this peer (" + identity_.public_key().hex() +
                                    "): the members holding it would refuse this peer");
  }
  return std::shared_ptr<const gossip::GossipCore::AdmissionList>(std::move(list));
}

Status PeerEngine::set_members(std::vector<PublicKey> members) {
  auto admitted = admission_list(members);
  if (!admitted) return admitted.status();
  admitted_ = std::move(*admitted);
  options_.members = std::move(members);
  // Gossip forgets those taken off (kRemoved closes what the swarm knows of them).
  gossip_->core().set_admitted(admitted_);
  gossip_->pump();
  if (admitted_ != nullptr) {
    for (const LinkStats& link : tcp_->links()) {
      if (!admitted_->count(link.peer)) tcp_->disconnect(link.peer, "taken off the member list");
    }
  }
  TH_LOG_INFO(kLog, "member list: " << (admitted_ ? std::to_string(admitted_->size()) + " members" : std::string("anyone holding the swarm key")));
  return Status::ok();
}

std::optional<asio::ip::tcp::endpoint> PeerEngine::data_endpoint_of(const PeerId& peer) const {
  auto member = gossip_->core().member(peer);
  if (!member || !member->record) return std::nullopt;
  const std::string& addr = member->record->record.data_addr;
  auto hp = core::parse_host_port(addr);
  std::error_code ec;
  const auto ip = hp ? asio::ip::make_address(hp->host, ec) : asio::ip::address{};
  if (!hp || ec) {
    TH_LOG_WARN(kLog, "peer " << peer.short_hex() << " gives a data address that is not IP:port: '" << addr << "'");
    return std::nullopt;
  }
  return asio::ip::tcp::endpoint(ip, hp->port);
}

}  // namespace tensorhub::peer
