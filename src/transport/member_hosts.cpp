#include "transport/member_hosts.hpp"

#include <optional>

#include "core/host_port.hpp"

namespace tensorhub::peer {

void MemberHosts::note(const gossip::MemberEvent& e) {
  std::optional<asio::ip::address> host;
  const bool gone = e.kind == gossip::MemberEventKind::kDead || e.kind == gossip::MemberEventKind::kLeft ||
                    e.kind == gossip::MemberEventKind::kRemoved || e.kind == gossip::MemberEventKind::kIdentityConflict;
  if (!gone && e.record) {
    if (auto hp = core::parse_host_port(e.record->record.data_addr)) {
      std::error_code ec;
      const auto ip = asio::ip::make_address(hp->host, ec);
      if (!ec) host = ip;
    }
  }
  auto forget = [&](const asio::ip::address& a) {
    auto it = members_at_.find(a);
    if (it != members_at_.end() && --it->second == 0) members_at_.erase(it);
  };
  auto known = host_of_.find(e.id);
  if (known != host_of_.end()) {
    if (host && known->second == *host) return;
    forget(known->second);
    host_of_.erase(known);
  }
  if (host && e.kind != gossip::MemberEventKind::kIdentityConflict) {
    host_of_.emplace(e.id, *host);
    ++members_at_[*host];
  }
}

}  // namespace tensorhub::peer
