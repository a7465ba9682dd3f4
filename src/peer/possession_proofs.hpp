// Proofs that a member holds the version its record says it holds.
//
// A record that says "complete" is the member's own word. A publisher that
// releases its buffer once R members hold a version (wait_replicated, the
// last-holder deferral) must not take that word for it: a member, or a
// handful of identities it made, could claim every version and let the only
// copy go. So a peer that holds a version complete challenges each member
// whose record claims it too: a fresh random nonce and kRanges random
// ranges of the image. The member answers with BLAKE2b-256 of the nonce and
// the bytes of those ranges, which only a holder of those bytes can
// compute; it counts as a replica once its answer matches, for the
// incarnation it answered in. A member holding a fraction f of the image
// passes with probability about f^kRanges.
//
// No I/O: time and randomness are inputs. The digests are the memory
// domain's (at most kRanges x kRangeBytes each, small enough for the
// caller's thread).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/hash.hpp"
#include "core/rng.hpp"
#include "core/time.hpp"
#include "seams/memory_domain.hpp"
#include "tensorhub/ids.hpp"

namespace tensorhub::peer {

struct PossessionChallenge {
  std::array<std::uint8_t, 16> nonce{};
  std::vector<ByteRange> ranges;
};

// kChallenge's bytes: nonce (16) || per range offset (8, BE) || length (4, BE).
std::vector<std::uint8_t> encode_challenge(const PossessionChallenge& challenge);
// Refuses (nullopt) anything but 1 to kRanges ranges, each of 1 to
// kRangeBytes inside an image of `image_size` bytes.
std::optional<PossessionChallenge> decode_challenge(std::span<const std::uint8_t> bytes, std::uint64_t image_size);

class PossessionProofs {
 public:
  static constexpr std::size_t kRanges = 4;
  static constexpr std::uint32_t kRangeBytes = 16 * 1024;
  // An answer later than this is not waited for: the member may be
  // challenged again.
  static constexpr Duration kAnswerTimeout = std::chrono::seconds(5);
  // Members whose state is kept per version at most.
  static constexpr std::size_t kMaxMembers = 65536;

  // A challenge for `peer` about `version` (an image of `image_size`
  // bytes), unless it proved it in `incarnation` or is still to answer one.
  // The caller computes what the answer must be and passes it to expect().
  std::optional<PossessionChallenge> challenge(TimePoint now, const ManifestId& version_id, const PeerId& peer,
                                               std::uint64_t incarnation, std::uint64_t image_size,
                                               core::SplitMix64& rng);
  void expect(const ManifestId& version_id, const PeerId& peer, const core::Blake2bDigest& answer);
  // An answer arrived; true when it proves possession (and is news).
  bool on_answer(const ManifestId& version_id, const PeerId& peer, std::span<const std::uint8_t> answer);
  // Whether `peer` proved it holds `version` in `incarnation`.
  bool proved(const ManifestId& version_id, const PeerId& peer, std::uint64_t incarnation) const;
  void forget(const ManifestId& version_id) { versions_.erase(version_id); }

 private:
  struct Entry {
    std::uint64_t incarnation = 0;
    TimePoint asked = kTimeNever;  // the pending challenge's, or kTimeNever
    core::Blake2bDigest expected{};
    bool expected_set = false;
    bool proved = false;
  };
  std::map<ManifestId, std::map<PeerId, Entry>> versions_;
};

}  // namespace tensorhub::peer
