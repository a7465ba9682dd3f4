// What the rollout GPUs of model-parallel instances fetch (a scenario's
// "inference"): the images the trainer ranks publish, and which shards of
// each a slice wants. No I/O.
//
// Trainer rank r publishes part r of the model (its 1/P of the bytes). A
// rollout GPU is slice k of an instance of G GPUs, and needs 1/G of every
// part. Two layouts:
//  - views: each part is published as G view images, one per slice (a
//    part's view of a declared selection, docs/parts.md): slice k fetches
//    view (r, k) of every part r whole, and nothing else.
//  - shards: each part is one image, and slices cut its bytes as
//    tensor-parallel ranks cut a model's layers today. The image is
//    `layers` equal layers; each layer's first strided_fraction of bytes is
//    strided (row-parallel tensors: every slice takes some bytes of every
//    row), so every slice wants all of it, and the rest is cut into G
//    contiguous chunks, slice k the k-th. A slice wants every shard its
//    bytes touch: shards verify whole, so they move whole.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/bitfield.hpp"
#include "sim/scenario.hpp"
#include "swarm/shard_layout.hpp"

namespace tensorhub::sim {

class SlicePlan {
 public:
  static constexpr std::uint32_t kEverySlice = UINT32_MAX;
  struct Image {
    std::uint32_t rank = 0;   // the trainer rank that publishes it
    std::uint32_t slice = kEverySlice;  // views: the one slice that fetches it
    swarm::ShardLayout layout;
  };

  // REQUIRES: scenario.inference.enabled().
  explicit SlicePlan(const Scenario& scenario);

  const std::vector<Image>& images() const { return images_; }
  std::uint32_t slices() const { return inference_.gpus_per_instance; }
  // The shards of image `image` slice `slice` fetches: empty when it
  // fetches none of the image. REQUIRES: image < images().size(), slice < slices().
  core::Bitfield wanted(std::size_t image, std::uint32_t slice) const;
  // The bytes slice `slice` fetches, of every image together.
  std::uint64_t fetched_bytes(std::uint32_t slice) const;
  // The bytes GPUs holding `slices` (repeats allowed) need from outside
  // themselves: each image's shards that any of them wants, once.
  std::uint64_t distinct_bytes(std::span<const std::uint32_t> slices) const;
  // A slice's own bytes: the model's size over the instance's GPUs.
  double slice_bytes() const;

 private:
  InferenceSpec inference_;
  std::uint64_t model_size_ = 0;
  std::vector<Image> images_;
};

// The bytes of the shards set in `shards`.
std::uint64_t shard_bytes(const core::Bitfield& shards, const swarm::ShardLayout& layout);

}  // namespace tensorhub::sim
