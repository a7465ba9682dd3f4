// What one rank of a model-parallel group says of itself to the group's
// other ranks (the kGroup data message): the versions it stages for the
// group and how far each has come. Ranks send it when it changes and every
// GroupBook::kHeartbeat; it is how they know each other alive.
//
// Encoding: a canonical msgpack array
//   [1, group name, size, rank, [[model, version, id (32), state, permille, reason], ...]]
// bounded like every decoder here (kMaxGroupStages entries, names by the
// model-name rule, reasons printable ASCII of at most kMaxStageReasonBytes).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "swarm/swarm_messages.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::peer {

enum class StageState : std::uint8_t {
  kStaging = 0,     // fetching its selection
  kStaged = 1,      // holds its selection, verified
  kFailed = 2,      // cannot stage it (reason)
  kCommitted = 3,   // saw every rank committing (or committed), and committed
  kCommitting = 4,  // holds it verified and waits in commit for the others
};
inline constexpr StageState kLastStageState = StageState::kCommitting;
std::string_view stage_state_name(StageState state);

struct StageEntry {
  std::string model;
  std::uint64_t version = 0;
  ManifestId id;  // the version's id: its manifest's, or its seal's
  StageState state = StageState::kStaging;
  std::uint16_t permille = 0;  // of its selection verified
  std::string reason;          // kFailed: why
  friend bool operator==(const StageEntry&, const StageEntry&) = default;
};

struct GroupState {
  std::string group;
  std::uint32_t size = 0;
  std::uint32_t rank = 0;
  std::vector<StageEntry> stages;  // sorted by (model, version), unique
  friend bool operator==(const GroupState&, const GroupState&) = default;
};

inline constexpr std::size_t kMaxGroupStages = 8;
inline constexpr std::size_t kMaxStageReasonBytes = 240;
inline constexpr std::size_t kMaxGroupStateBytes = swarm::kMaxGroupBytes;

// `text` as a stage's reason: printable ASCII (others become '?'), cut to
// kMaxStageReasonBytes.
std::string stage_reason(std::string_view text);

// REQUIRES: validate_group_state(state) is OK.
std::vector<std::uint8_t> encode_group_state(const GroupState& state);
// kInvalidArgument naming the first broken rule: the group name (the
// model-name rule, at most gossip::kMaxGroupNameBytes), a rank below a size
// of 1 to gossip::kMaxGroupSize, models, reasons, order, count.
Status validate_group_state(const GroupState& state);
// Strict and bounded; kCorrupt with a one-line reason.
Result<GroupState> decode_group_state(std::span<const std::uint8_t> bytes);

}  // namespace tensorhub::peer
