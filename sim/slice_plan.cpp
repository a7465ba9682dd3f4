#include "sim/slice_plan.hpp"

#include <algorithm>

namespace tensorhub::sim {
namespace {

// Sets the shards that bytes [begin, end) of an image touch.
void mark_bytes(core::Bitfield& shards, const swarm::ShardLayout& layout, std::uint64_t begin, std::uint64_t end) {
  if (begin >= end) return;
  const std::uint64_t last = (end - 1) / layout.shard_size;
  for (std::uint64_t s = begin / layout.shard_size; s <= last; ++s) shards.set(s);
}

// Piece `index` of `count` equal pieces of `size` bytes (the last ones one byte longer).
std::uint64_t piece_size(std::uint64_t size, std::uint64_t count, std::uint64_t index) {
  return (index + 1) * size / count - index * size / count;
}

}  // namespace

SlicePlan::SlicePlan(const Scenario& scenario) : inference_(scenario.inference), model_size_(scenario.model.size) {
  const std::uint32_t ranks = scenario.model.trainer_ranks;
  const std::uint32_t gpus = inference_.gpus_per_instance;
  const bool views = inference_.layout == InferenceSpec::Layout::kViews;
  for (std::uint32_t r = 0; r < ranks; ++r) {
    const std::uint64_t part = piece_size(model_size_, ranks, r);
    for (std::uint32_t k = 0; k < (views ? gpus : 1); ++k) {
      const std::uint64_t size = views ? piece_size(part, gpus, k) : part;
      if (size == 0) continue;
      images_.push_back(Image{r, views ? k : kEverySlice,
                              swarm::ShardLayout{size, scenario.model.shard_size, scenario.model.flow_size}});
    }
  }
}

core::Bitfield SlicePlan::wanted(std::size_t image, std::uint32_t slice) const {
  const Image& i = images_[image];
  const swarm::ShardLayout& layout = i.layout;
  if (i.slice != kEverySlice) return i.slice == slice ? core::Bitfield(layout.shard_count(), true) : core::Bitfield();
  core::Bitfield shards(layout.shard_count());
  const std::uint64_t size = layout.total_size, layers = inference_.layers, gpus = inference_.gpus_per_instance;
  for (std::uint64_t layer = 0; layer < layers; ++layer) {
    const std::uint64_t begin = layer * size / layers, end = (layer + 1) * size / layers;
    const auto strided = static_cast<std::uint64_t>(inference_.strided_fraction * static_cast<double>(end - begin));
    mark_bytes(shards, layout, begin, begin + strided);
    const std::uint64_t rest = end - begin - strided, chunks = begin + strided;
    mark_bytes(shards, layout, chunks + slice * rest / gpus, chunks + (slice + 1) * rest / gpus);
  }
  return shards;
}

std::uint64_t SlicePlan::fetched_bytes(std::uint32_t slice) const {
  const std::uint32_t one[] = {slice};
  return distinct_bytes(one);
}

std::uint64_t SlicePlan::distinct_bytes(std::span<const std::uint32_t> slices) const {
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < images_.size(); ++i) {
    core::Bitfield any(images_[i].layout.shard_count());
    for (std::uint32_t k : slices) {
      const core::Bitfield w = wanted(i, k);
      for (std::size_t s = w.find_next(0, true); s < w.size(); s = w.find_next(s + 1, true)) any.set(s);
    }
    bytes += shard_bytes(any, images_[i].layout);
  }
  return bytes;
}

double SlicePlan::slice_bytes() const {
  return static_cast<double>(model_size_) / inference_.gpus_per_instance;
}

std::uint64_t shard_bytes(const core::Bitfield& shards, const swarm::ShardLayout& layout) {
  std::uint64_t bytes = 0;
  for (std::size_t s = shards.find_next(0, true); s < shards.size(); s = shards.find_next(s + 1, true)) {
    bytes += layout.shard_length(ShardIndex{static_cast<std::uint32_t>(s)});
  }
  return bytes;
}

}  // namespace tensorhub::sim
