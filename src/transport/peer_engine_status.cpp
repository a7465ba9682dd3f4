// PeerEngine's status: the member table, versions, equivocations and data
// links as the JSON that `tensorhub status --json` prints (docs/cli.md).
#include <nlohmann/json.hpp>

#include "transport/peer_engine.hpp"
#include "transport/status_json.hpp"

namespace tensorhub::peer {

std::string PeerEngine::status_json() const {
  const TimePoint at = now();
  const std::uint64_t wall = transport::wall_clock_ms();
  auto unix_ms = [&](TimePoint t) -> std::uint64_t {
    if (t == kTimeNever) return 0;
    const auto ago = std::chrono::duration_cast<std::chrono::milliseconds>(at - t).count();
    return wall - static_cast<std::uint64_t>(std::max<std::int64_t>(0, ago));
  };
  auto j = transport::gossip_status_json(gossip_->core(), at);
  nlohmann::ordered_json versions = nlohmann::ordered_json::array();
  for (const auto& [id, v] : core_->versions()) {
    const auto swarm_progress = core_->swarm().progress(id);
    const std::size_t replicas = core_->replicas(id);
    const auto watch = watch_of(v);
    const double fetch_seconds = v->completed == kTimeNever || v->role == VersionRole::kPublished
                                     ? 0.0
                                     : to_seconds(v->completed - v->started);
    versions.push_back({{"model", v->model},
                        {"version", v->number.value},
                        {"id", id.hex()},
                        {"state", std::string(version_state_name(v->state))},
                        {"published", v->role == VersionRole::kPublished},
                        {"selection", !v->whole()},  // totals count the wanted shards only
                        {"memory", std::string(v->domain->name())},
                        {"bytes_total", v->progress.bytes_total},
                        {"bytes_verified", v->progress.bytes_verified},
                        {"shards_total", v->progress.shards_total},
                        {"shards_verified", v->progress.shards_verified},
                        {"sources", swarm_progress ? swarm_progress->neighbours : 0},
                        {"fetch_seconds", fetch_seconds},
                        {"started_unix_ms", unix_ms(v->started)},
                        {"complete_unix_ms", unix_ms(v->completed)},
                        {"bytes_served", watch ? watch->bytes_served.load() : 0},
                        {"requests_refused", watch ? watch->requests_refused.load() : 0},
                        {"bad_shards", v->bad_shards},
                        {"requests_timed_out", swarm_progress ? swarm_progress->requests_timed_out : 0},
                        {"duplicate_bytes", swarm_progress ? swarm_progress->duplicate_bytes : 0},
                        {"endgame", swarm_progress ? swarm_progress->endgame : false},
                        {"replicas", replicas}});
    if (v->view_of) {
      // A view of a part (served from it, or fetched): which part's.
      versions.back()["view_of"] = v->view_of->hex();
    } else if (const auto& part = v->manifest->part()) {
      // One part of a version in parts: which, and whether a seal names it.
      nlohmann::ordered_json& entry = versions.back();
      entry["part"] = {part->index, part->count};
      const Status sealed = core_->part_sealed(*v);
      entry["sealed"] = sealed.is_ok();
      if (!sealed.is_ok()) entry["seal_status"] = sealed.to_string();
    }
  }
  j["versions"] = std::move(versions);
  // The verified head of each model (known_heads is what gossip names).
  nlohmann::ordered_json heads = nlohmann::ordered_json::object();
  for (const VersionInfo& h : core_->heads().heads()) {
    heads[h.model] = {{"version", h.version}, {"id", h.id.hex()}};
    const KnownVersion* k = core_->heads().known(h.id);
    if (k != nullptr && k->in_parts()) heads[h.model]["parts"] = k->sealed()->parts().size();
  }
  j["heads"] = std::move(heads);
  nlohmann::ordered_json equivocations = nlohmann::ordered_json::array();
  for (const Equivocation& e : core_->heads().equivocations()) {
    equivocations.push_back({{"model", e.model},
                             {"version", e.version.value},
                             {"first", e.first.id().hex()},
                             {"second", e.second.id().hex()},
                             {"publisher", e.second.publisher().hex()}});
  }
  j["equivocations"] = std::move(equivocations);
  // The model-parallel groups this peer is a rank of, and each rank as seen here.
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (const gossip::GroupEntry& g : core_->groups().claims()) {
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (const GroupBook::RankView& r : core_->groups().ranks(g.name)) {
      nlohmann::ordered_json claimants = nlohmann::ordered_json::array();
      for (const PeerId& p : r.claimants) claimants.push_back(p.hex());
      nlohmann::ordered_json stages = nlohmann::ordered_json::array();
      for (const StageEntry& e : r.stages) {
        stages.push_back({{"model", e.model},
                          {"version", e.version},
                          {"id", e.id.hex()},
                          {"state", std::string(stage_state_name(e.state))},
                          {"permille", e.permille},
                          {"reason", e.reason}});
      }
      nlohmann::ordered_json rank = {{"rank", r.rank}, {"self", r.self}, {"claimed_by", std::move(claimants)}};
      if (!r.self) rank["heard_ms_ago"] = r.heard ? std::chrono::duration_cast<std::chrono::milliseconds>(at - r.last_heard).count() : -1;
      rank["stages"] = std::move(stages);
      ranks.push_back(std::move(rank));
    }
    groups.push_back({{"name", g.name}, {"size", g.size}, {"rank", g.rank}, {"ranks", std::move(ranks)}});
  }
  j["groups"] = std::move(groups);
  nlohmann::ordered_json links = nlohmann::ordered_json::array();
  for (const LinkStats& link : tcp_->links()) {
    nlohmann::ordered_json lanes = nlohmann::ordered_json::array();
    for (const auto& lane : link.lanes) {
      lanes.push_back({{"lane", lane.lane}, {"bytes_sent", lane.bytes_sent}, {"bytes_received", lane.bytes_received}});
    }
    links.push_back({{"peer", link.peer.hex()}, {"transport", tcp_->name()}, {"lanes", std::move(lanes)}});
  }
  j["data_links"] = std::move(links);
  j["data_addr"] = tcp_->bound().to_string();
  j["handshakes_shed"] = tcp_->handshakes_shed();
  j["discarded_piece_bytes"] = core_->swarm().discarded_piece_bytes();
  j["work_queued"] = pool_.queued();
  // Payloads for memory the host cannot write (GPU memory).
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  for (const CudaDeviceInfo& d : gpus_ ? gpus_->devices : std::vector<CudaDeviceInfo>{}) {
    gpus.push_back({{"uuid", d.uuid}, {"name", d.name}, {"rdma_registration", d.rdma_registration}});
  }
  j["gpus"] = std::move(gpus);
  j["gpus_note"] = gpus_                  ? gpus_->note
                   : internal_.probe_gpus ? std::string("probing")
                                          : std::string("not probed (a library peer loads CUDA only to fetch into a GPU)");
  j["landings"] = {{"staged", copies_.landings_begun()},
                   {"through_host_buffer", staged_.through_host()},
                   {"served_staged", copies_.fills_served()},
                   {"in_flight", copies_.in_flight()}};
  // Which neighbours move payloads by RDMA READ (docs/rdma.md).
  const RdmaStatus rdma = rdma_status();
  nlohmann::ordered_json rdma_neighbours = nlohmann::ordered_json::array();
  for (const auto& n : rdma.neighbours) {
    rdma_neighbours.push_back({{"peer", n.peer.hex()},
                               {"state", n.state},
                               {"reads", n.reads},
                               {"bytes", n.bytes},
                               {"failed_reads", n.failed_reads},
                               {"grants", n.grants}});
  }
  nlohmann::ordered_json rdma_nics = nlohmann::ordered_json::array();
  for (const auto& nic : rdma.nics) {
    rdma_nics.push_back({{"name", nic.name}, {"preferred", nic.preferred}, {"bytes_read", nic.bytes_read}});
  }
  j["rdma"] = {{"nics", std::move(rdma_nics)},
               {"note", rdma_note_},
               {"grants_given", rdma.grants_given},
               {"reads", rdma.reads},
               {"bytes_read", rdma.bytes_read},
               {"failed_reads", rdma.failed_reads},
               {"neighbours", std::move(rdma_neighbours)}};
  j["host_mates"] = {{"channel", mates_.listening()},
                     {"shards_copied", mate_shards_copied_},
                     {"bytes_copied", mate_bytes_copied_},
                     {"versions_shared", mates_.versions_lent()}};
  // Records are validated when decoded; should a string still hold invalid
  // UTF-8, it is replaced rather than thrown.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace tensorhub::peer
