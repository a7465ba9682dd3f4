#include "peer/group_state.hpp"

#include <tuple>

#include "core/model_name.hpp"
#include "core/msgpack_reader.hpp"
#include "core/msgpack_writer.hpp"
#include "core/quoted.hpp"
#include "gossip/peer_record.hpp"

namespace tensorhub::peer {
namespace {

constexpr std::uint64_t kGroupStateFormat = 1;
constexpr std::size_t kMaxModelBytes = 128;

}  // namespace

std::string_view stage_state_name(StageState state) {
  switch (state) {
    case StageState::kStaging: return "staging";
    case StageState::kStaged: return "staged";
    case StageState::kFailed: return "failed";
    case StageState::kCommitted: return "committed";
    case StageState::kCommitting: return "committing";
  }
  return "unknown";
}

std::string stage_reason(std::string_view text) {
  std::string out(text.substr(0, kMaxStageReasonBytes));
  for (char& c : out) {
    if (!core::is_printable_ascii(c)) c = '?';
  }
  return out;
}

Status validate_group_state(const GroupState& s) {
  TENSORHUB_RETURN_IF_ERROR(core::validate_model_name(s.group, gossip::kMaxGroupNameBytes).with_context("group"));
  if (s.size == 0 || s.size > gossip::kMaxGroupSize || s.rank >= s.size) {
    return Status::invalid_argument("group " + core::quoted(s.group) + ": rank " + std::to_string(s.rank) + " of " +
                                    std::to_string(s.size) + " (ranks are below a size of 1 to " +
                                    std::to_string(gossip::kMaxGroupSize) + ")");
  }
  if (s.stages.size() > kMaxGroupStages) {
    return Status::invalid_argument("group state with " + std::to_string(s.stages.size()) + " stages (at most " +
                                    std::to_string(kMaxGroupStages) + ")");
  }
  for (std::size_t i = 0; i < s.stages.size(); ++i) {
    const StageEntry& e = s.stages[i];
    TENSORHUB_RETURN_IF_ERROR(core::validate_model_name(e.model, kMaxModelBytes).with_context("staged version"));
    if (e.state > kLastStageState) return Status::invalid_argument("staged version of an unknown state");
    if (e.permille > 1000) return Status::invalid_argument("staged version above 1000 permille");
    if (e.reason.size() > kMaxStageReasonBytes || !core::is_printable_ascii(e.reason)) {
      return Status::invalid_argument("a stage's reason is longer than " + std::to_string(kMaxStageReasonBytes) +
                                      " bytes or not printable ASCII");
    }
    if (i > 0 && !(std::tie(s.stages[i - 1].model, s.stages[i - 1].version) < std::tie(e.model, e.version))) {
      return Status::invalid_argument("staged versions are not sorted by (model, version), or repeat one");
    }
  }
  return Status::ok();
}

std::vector<std::uint8_t> encode_group_state(const GroupState& s) {
  std::vector<std::uint8_t> out;
  out.reserve(64 + s.stages.size() * 96);
  core::MsgpackWriter w(out);
  w.write_array_header(5);
  w.write_uint(kGroupStateFormat);
  w.write_str(s.group);
  w.write_uint(s.size);
  w.write_uint(s.rank);
  w.write_array_header(static_cast<std::uint32_t>(s.stages.size()));
  for (const StageEntry& e : s.stages) {
    w.write_array_header(6);
    w.write_str(e.model);
    w.write_uint(e.version);
    w.write_bin(e.id.bytes);
    w.write_uint(static_cast<std::uint8_t>(e.state));
    w.write_uint(e.permille);
    w.write_str(e.reason);
  }
  return out;
}

Result<GroupState> decode_group_state(std::span<const std::uint8_t> bytes) {
  if (bytes.size() > kMaxGroupStateBytes) {
    return Status::corrupt("group state of " + std::to_string(bytes.size()) + " bytes (at most " +
                           std::to_string(kMaxGroupStateBytes) + ")");
  }
  core::MsgpackReader r(bytes);
  GroupState s;
  std::uint64_t format = 0, size = 0, rank = 0;
  std::string_view text;
  r.expect_array("group state", 5);
  if (r.read_uint("group state format", format) && format != kGroupStateFormat) {
    r.fail("group state format", "unknown (this peer reads " + std::to_string(kGroupStateFormat) + ")");
  }
  if (r.read_str("group name", text, gossip::kMaxGroupNameBytes)) s.group.assign(text);
  if (r.read_uint("group size", size, gossip::kMaxGroupSize)) s.size = static_cast<std::uint32_t>(size);
  if (r.read_uint("group rank", rank, gossip::kMaxGroupSize)) s.rank = static_cast<std::uint32_t>(rank);
  std::uint32_t count = 0;
  if (r.read_array_header("stages", count, kMaxGroupStages, 7)) {
    s.stages.resize(count);
    for (StageEntry& e : s.stages) {
      std::uint64_t state = 0, permille = 0;
      if (!(r.expect_array("stage", 6) && r.read_str("stage model", text, kMaxModelBytes))) break;
      e.model.assign(text);
      if (!(r.read_uint("stage version", e.version) && r.read_bin_exact("stage id", e.id.bytes) &&
            r.read_uint("stage state", state, static_cast<std::uint8_t>(kLastStageState)) &&
            r.read_uint("stage permille", permille, 1000) && r.read_str("stage reason", text, kMaxStageReasonBytes))) {
        break;
      }
      e.state = static_cast<StageState>(state);
      e.permille = static_cast<std::uint16_t>(permille);
      e.reason.assign(text);
    }
  }
  TENSORHUB_RETURN_IF_ERROR(r.finish());
  if (Status valid = validate_group_state(s); !valid.is_ok()) return Status::corrupt(valid.message());
  return s;
}

}  // namespace tensorhub::peer
