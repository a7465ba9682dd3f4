#include "peer/possession_proofs.hpp"

#include <sodium.h>

namespace tensorhub::peer {

std::vector<std::uint8_t> encode_challenge(const PossessionChallenge& c) {
  std::vector<std::uint8_t> out(c.nonce.begin(), c.nonce.end());
  for (const ByteRange& r : c.ranges) {
    for (int i = 7; i >= 0; --i) out.push_back(static_cast<std::uint8_t>(r.offset >> (8 * i)));
    for (int i = 3; i >= 0; --i) out.push_back(static_cast<std::uint8_t>(r.length >> (8 * i)));
  }
  return out;
}

std::optional<PossessionChallenge> decode_challenge(std::span<const std::uint8_t> bytes, std::uint64_t image_size) {
  constexpr std::size_t kRangeWire = 12;
  if (bytes.size() < 16 + kRangeWire || (bytes.size() - 16) % kRangeWire != 0 ||
      (bytes.size() - 16) / kRangeWire > PossessionProofs::kRanges) {
    return std::nullopt;
  }
  PossessionChallenge c;
  std::copy(bytes.begin(), bytes.begin() + 16, c.nonce.begin());
  for (std::size_t at = 16; at < bytes.size(); at += kRangeWire) {
    ByteRange r;
    for (std::size_t i = 0; i < 8; ++i) r.offset = r.offset << 8 | bytes[at + i];
    for (std::size_t i = 8; i < 12; ++i) r.length = r.length << 8 | bytes[at + i];
    if (r.length == 0 || r.length > PossessionProofs::kRangeBytes || r.offset > image_size ||
        r.length > image_size - r.offset) {
      return std::nullopt;
    }
    c.ranges.push_back(r);
  }
  return c;
}

std::optional<PossessionChallenge> PossessionProofs::challenge(TimePoint now, const ManifestId& version_id,
                                                               const PeerId& peer, std::uint64_t incarnation,
                                                               std::uint64_t image_size, core::SplitMix64& rng) {
  if (image_size == 0) return std::nullopt;
  auto& members = versions_[version_id];
  auto it = members.find(peer);
  if (it == members.end()) {
    if (members.size() >= kMaxMembers) return std::nullopt;
    it = members.emplace(peer, Entry{}).first;
  }
  Entry& e = it->second;
  if (e.incarnation == incarnation && e.proved) return std::nullopt;
  if (e.asked != kTimeNever && now - e.asked < kAnswerTimeout) return std::nullopt;
  e = Entry{incarnation, now, {}, false, false};
  PossessionChallenge c;
  for (std::size_t i = 0; i < c.nonce.size(); i += 8) {
    const std::uint64_t r = rng.next();
    for (std::size_t j = 0; j < 8; ++j) c.nonce[i + j] = static_cast<std::uint8_t>(r >> (8 * j));
  }
  const auto length = static_cast<std::uint32_t>(std::min<std::uint64_t>(kRangeBytes, image_size));
  for (std::size_t i = 0; i < kRanges; ++i) c.ranges.push_back(ByteRange{rng.below(image_size - length + 1), length});
  return c;
}

void PossessionProofs::expect(const ManifestId& version_id, const PeerId& peer, const core::Blake2bDigest& answer) {
  auto v = versions_.find(version_id);
  if (v == versions_.end()) return;
  auto it = v->second.find(peer);
  if (it == v->second.end()) return;
  it->second.expected = answer;
  it->second.expected_set = true;
}

bool PossessionProofs::on_answer(const ManifestId& version_id, const PeerId& peer, std::span<const std::uint8_t> answer) {
  auto v = versions_.find(version_id);
  if (v == versions_.end()) return false;
  auto it = v->second.find(peer);
  if (it == v->second.end()) return false;
  Entry& e = it->second;
  if (e.proved || e.asked == kTimeNever || !e.expected_set || answer.size() != e.expected.size()) return false;
  e.asked = kTimeNever;  // one answer per challenge, right or wrong
  e.proved = sodium_memcmp(answer.data(), e.expected.data(), e.expected.size()) == 0;
  return e.proved;
}

bool PossessionProofs::proved(const ManifestId& version_id, const PeerId& peer, std::uint64_t incarnation) const {
  auto v = versions_.find(version_id);
  if (v == versions_.end()) return false;
  auto it = v->second.find(peer);
  return it != v->second.end() && it->second.proved && it->second.incarnation == incarnation;
}

}  // namespace tensorhub::peer
