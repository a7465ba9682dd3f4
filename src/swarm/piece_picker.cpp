#include "swarm/piece_picker.hpp"

#include <cassert>
#include <stdexcept>

namespace tensorhub::swarm {

PiecePicker::PiecePicker(std::size_t shard_count, std::uint64_t seed)
    : availability_(shard_count, 0), pos_(shard_count), bucket_start_(1, 0), rng_(seed) {
  pieces_.reserve(shard_count);
  for (std::size_t i = 0; i < shard_count; ++i) pieces_.push_back(ShardIndex{static_cast<std::uint32_t>(i)});
  for (std::size_t i = pieces_.size(); i > 1; --i) std::swap(pieces_[i - 1], pieces_[rng_.below(i)]);
  for (std::uint32_t i = 0; i < size(); ++i) pos_[pieces_[i].value] = i;
}

void PiecePicker::grow_buckets(std::uint32_t a) {
  // New, empty buckets start at the end of the vector.
  while (bucket_start_.size() <= a) bucket_start_.push_back(size());
}

void PiecePicker::swap_positions(std::uint32_t i, std::uint32_t j) {
  if (i == j) return;
  std::swap(pieces_[i], pieces_[j]);
  pos_[pieces_[i].value] = i;
  pos_[pieces_[j].value] = j;
}

void PiecePicker::move_up(ShardIndex shard) {
  const std::uint32_t a = availability_[shard.value]++;
  if (pos_[shard.value] == kNotWanted) return;
  grow_buckets(a + 1);
  // Swap to the last slot of bucket a, then shift the boundary down by one.
  const std::uint32_t last = start(a + 1) - 1;
  swap_positions(pos_[shard.value], last);
  --bucket_start_[a + 1];
  shuffle_into_bucket(shard, a + 1);
}

void PiecePicker::shuffle_into_bucket(ShardIndex shard, std::uint32_t a) {
  // A random slot of its new bucket: otherwise shards moved together (a
  // whole bitfield) would line up in index order and lose the tie-break.
  const std::uint32_t first = start(a), end = start(a + 1);
  swap_positions(pos_[shard.value], first + static_cast<std::uint32_t>(rng_.below(end - first)));
}

void PiecePicker::move_down(ShardIndex shard) {
  assert(availability_[shard.value] > 0);
  const std::uint32_t a = availability_[shard.value]--;
  if (pos_[shard.value] == kNotWanted) return;
  // Swap to the first slot of bucket a, then shift the boundary up by one.
  const std::uint32_t first = start(a);
  swap_positions(pos_[shard.value], first);
  ++bucket_start_[a];
  shuffle_into_bucket(shard, a - 1);
}

void PiecePicker::increment(ShardIndex shard) { move_up(shard); }

void PiecePicker::decrement(ShardIndex shard) {
  if (availability_[shard.value] > 0) move_down(shard);
}

void PiecePicker::add_peer(const core::Bitfield& has) {
  for (std::size_t i = has.find_next(0, true); i < has.size(); i = has.find_next(i + 1, true)) {
    move_up(ShardIndex{static_cast<std::uint32_t>(i)});
  }
}

void PiecePicker::remove_peer(const core::Bitfield& has) {
  for (std::size_t i = has.find_next(0, true); i < has.size(); i = has.find_next(i + 1, true)) {
    decrement(ShardIndex{static_cast<std::uint32_t>(i)});
  }
}

void PiecePicker::drop(ShardIndex shard) {
  if (pos_[shard.value] == kNotWanted) return;
  // Carry it to the very end, bucket by bucket, then pop it.
  const std::uint32_t a = availability_[shard.value];
  std::uint32_t p = pos_[shard.value];
  for (std::uint32_t b = a; b < bucket_start_.size(); ++b) {
    const std::uint32_t last = start(b + 1) - 1;
    swap_positions(p, last);
    p = last;
    if (b + 1 < bucket_start_.size()) --bucket_start_[b + 1];
  }
  assert(p == size() - 1);
  pieces_.pop_back();
  pos_[shard.value] = kNotWanted;
}

void PiecePicker::restore(ShardIndex shard) {
  if (pos_[shard.value] != kNotWanted) return;
  const std::uint32_t a = availability_[shard.value];
  grow_buckets(a);
  pieces_.push_back(shard);
  std::uint32_t p = size() - 1;
  pos_[shard.value] = p;
  // Carry it down from the end into bucket a.
  for (std::uint32_t b = static_cast<std::uint32_t>(bucket_start_.size()) - 1; b > a; --b) {
    const std::uint32_t first = bucket_start_[b];
    swap_positions(p, first);
    p = first;
    ++bucket_start_[b];
  }
}

std::vector<ShardIndex> PiecePicker::pick(const core::Bitfield& has, std::size_t count,
                                          const std::function<bool(ShardIndex)>& eligible,
                                          std::uint32_t min_availability) const {
  std::vector<ShardIndex> out;
  if (count == 0) return out;
  for_each_held_rarest_first(has, min_availability, [&](ShardIndex s) {
    if (!eligible || eligible(s)) out.push_back(s);
    return out.size() < count;
  });
  return out;
}

std::uint32_t PiecePicker::min_availability() const {
  for (std::uint32_t a = 0; a < bucket_start_.size(); ++a) {
    if (start(a) < start(a + 1)) return a;
  }
  return 0;
}

void PiecePicker::check_invariants() const {
  std::size_t wanted = 0;
  for (std::size_t s = 0; s < pos_.size(); ++s) {
    if (pos_[s] == kNotWanted) continue;
    ++wanted;
    if (pieces_.at(pos_[s]).value != s) throw std::logic_error("piece picker: position map broken");
  }
  if (wanted != pieces_.size()) throw std::logic_error("piece picker: wanted count mismatch");
  for (std::uint32_t a = 0; a < bucket_start_.size(); ++a) {
    if (start(a) > start(a + 1)) throw std::logic_error("piece picker: bucket boundaries out of order");
    for (std::uint32_t i = start(a); i < start(a + 1); ++i) {
      if (availability_[pieces_[i].value] != a) throw std::logic_error("piece picker: shard in the wrong bucket");
    }
  }
  if (!bucket_start_.empty() && bucket_start_[0] != 0) throw std::logic_error("piece picker: bucket 0 must start at 0");
}

}  // namespace tensorhub::swarm
