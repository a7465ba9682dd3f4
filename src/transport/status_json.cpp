#include "transport/status_json.hpp"

namespace tensorhub::transport {
namespace {

using Json = nlohmann::ordered_json;

Json record_json(const gossip::PeerRecord& r, std::string_view state, std::uint64_t incarnation) {
  Json j;
  j["id"] = r.id.hex();
  j["addr"] = r.gossip_addr;
  j["data_addr"] = r.data_addr;
  j["state"] = std::string(state);
  j["incarnation"] = incarnation;
  j["seq"] = r.seq;
  j["dc"] = r.topology.dc;
  j["rack"] = r.topology.rack;
  j["host"] = r.topology.host;
  Json heads = Json::object();
  for (const auto& h : r.heads) heads[h.model] = {{"version", h.version}, {"id", h.manifest_id.hex()}};
  j["heads"] = std::move(heads);
  Json holds = Json::array();
  for (const auto& h : r.holdings) {
    Json hold{{"model", h.model}, {"version", h.version}, {"id", h.manifest_id.hex()},
              {"progress", h.progress_permille / 1000.0}, {"complete", h.complete()}};
    if (h.is_part_set()) {
      // A part set: "id" is the seal's; the parts held, and those complete.
      const auto indices = [](const core::Bitfield& bits) {
        Json list = Json::array();
        for (std::size_t i = bits.find_next(0, true); i < bits.size(); i = bits.find_next(i + 1, true)) list.push_back(i);
        return list;
      };
      hold["part_count"] = h.parts.size();
      hold["parts"] = indices(h.parts);
      hold["complete_parts"] = indices(h.complete_parts);
      hold["selection"] = h.selection ? Json(h.selection->hex()) : Json(nullptr);
    }
    holds.push_back(std::move(hold));
  }
  j["holds"] = std::move(holds);
  return j;
}

}  // namespace

nlohmann::ordered_json gossip_status_json(const gossip::GossipCore& core, TimePoint now) {
  Json out;
  const auto& self = core.self_record()->record;
  out["self"] = record_json(self, core.leaving() ? "left" : "alive", self.incarnation);
  out["self"]["local_health"] = core.local_health();
  const auto& st = core.stats();
  out["self"]["record"] = {{"bytes", st.record_bytes},
                           {"limit_bytes", gossip::kMaxRecordBytes},
                           {"heads_left_out", st.record_heads_left_out},
                           {"holdings_left_out", st.record_holdings_left_out}};
  Json members = Json::array();
  for (const auto& m : core.members()) {
    Json j = record_json(m.record->record, gossip::liveness_name(m.liveness), m.incarnation);
    j["since_seconds"] = to_seconds(now - m.since);
    members.push_back(std::move(j));
  }
  out["members"] = std::move(members);
  Json heads = Json::object();
  for (const auto& h : core.known_heads().heads()) heads[h.model] = {{"version", h.version}, {"id", h.manifest_id.hex()}};
  out["known_heads"] = std::move(heads);
  const auto& s = core.stats();
  out["stats"] = {{"datagrams_in", s.datagrams_in},
                  {"datagrams_out", s.datagrams_out},
                  {"bytes_in", s.bytes_in},
                  {"bytes_out", s.bytes_out},
                  {"dropped_oversized", s.dropped_oversized},
                  {"dropped_rate_limited", s.dropped_rate_limited},
                  {"dropped_unauthenticated", s.dropped_unauthenticated},
                  {"dropped_malformed", s.dropped_malformed},
                  {"dropped_replayed", s.dropped_replayed},
                  {"dropped_misdirected", s.dropped_misdirected},
                  {"dropped_forged_sender", s.dropped_forged_sender},
                  {"records_accepted", s.records_accepted},
                  {"records_stale", s.records_stale},
                  {"records_rejected", s.records_rejected},
                  {"liveness_forged", s.liveness_forged},
                  {"liveness_unsigned", s.liveness_unsigned},
                  {"liveness_rate_limited", s.liveness_rate_limited},
                  {"acks_unasked", s.acks_unasked},
                  {"syncs_refused", s.syncs_refused},
                  {"pair_keys_derived", s.pair_keys_derived},
                  {"identity_conflicts", s.identity_conflicts},
                  {"not_admitted", s.not_admitted},
                  {"probes", s.probes},
                  {"probes_failed", s.probes_failed},
                  {"suspicions", s.suspicions},
                  {"refutations", s.refutations},
                  {"streams_opened", s.streams_opened},
                  {"streams_accepted", s.streams_accepted},
                  {"streams_failed", s.streams_failed},
                  {"records_signed", s.records_signed},
                  {"records_unsigned", s.records_unsigned},
                  {"datagrams_unsent", s.datagrams_unsent}};
  return out;
}

}  // namespace tensorhub::transport
