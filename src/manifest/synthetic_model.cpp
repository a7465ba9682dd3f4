#include "manifest/synthetic_model.hpp"

#include <algorithm>

#include "core/parallel_for.hpp"
#include "core/random_fill.hpp"
#include "tensorhub/safetensors.hpp"

namespace tensorhub {
namespace {

// Fills big spans in parallel, in 8 MiB pieces at stable positions, so the
// bytes do not depend on the number of threads.
void fill_parallel(std::span<std::byte> out, std::uint64_t seed, unsigned threads) {
  constexpr std::size_t kPiece = 8u << 20;
  const std::size_t pieces = (out.size() + kPiece - 1) / kPiece;
  core::parallel_for(pieces, threads, [&](std::size_t p) {
    const std::size_t begin = p * kPiece;
    core::fill_pseudo_random(out.subspan(begin, std::min(kPiece, out.size() - begin)), seed, begin);
  });
}

}  // namespace

Result<std::vector<std::byte>> make_synthetic_safetensors(const SyntheticModelSpec& spec) {
  if (spec.data_bytes == 0 || spec.data_bytes % 2 != 0) {
    return Status::invalid_argument("synthetic model size must be a positive, even number of bytes");
  }
  if (spec.tensor_bytes == 0 || spec.tensor_bytes % 2 != 0) {
    return Status::invalid_argument("synthetic tensor size must be a positive, even number of bytes");
  }
  const std::uint64_t count = (spec.data_bytes + spec.tensor_bytes - 1) / spec.tensor_bytes;
  std::vector<TensorEntry> tensors;
  tensors.reserve(count);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t offset = i * spec.tensor_bytes;
    const std::uint64_t bytes = std::min(spec.tensor_bytes, spec.data_bytes - offset);
    const std::uint64_t elements = bytes / 2;
    std::vector<std::uint64_t> shape =
        elements % 1024 == 0 ? std::vector<std::uint64_t>{elements / 1024, 1024} : std::vector<std::uint64_t>{elements};
    tensors.push_back(TensorEntry{"model.layers." + std::to_string(i) + ".weight", DType::kBF16, std::move(shape),
                                  offset, bytes});
  }
  auto header = encode_safetensors_header(tensors, {{"format", "pt"}, {"generator", "tensorhub synthetic"}});
  if (!header) return header.status();
  std::vector<std::byte> file(header->size() + spec.data_bytes);
  std::copy(header->begin(), header->end(), file.begin());
  fill_parallel(std::span(file).subspan(header->size()), spec.seed, spec.threads);
  return file;
}

Result<std::size_t> mutate_safetensors(std::vector<std::byte>& file, double fraction, std::uint64_t seed,
                                       unsigned threads) {
  auto layout = parse_safetensors(file);
  if (!layout) return layout.status();
  if (fraction <= 0 || layout->tensors.empty()) return std::size_t{0};
  core::SplitMix64 rng(seed);
  std::vector<std::size_t> chosen;
  for (std::size_t i = 0; i < layout->tensors.size(); ++i) {
    if (rng.unit() < fraction) chosen.push_back(i);
  }
  if (chosen.empty()) chosen.push_back(rng.below(layout->tensors.size()));
  for (std::size_t i : chosen) {
    const TensorEntry& t = layout->tensors[i];
    fill_parallel(std::span(file).subspan(t.byte_offset, t.byte_length), seed * 0x9e3779b97f4a7c15ull + i + 1,
                  threads);
  }
  return chosen.size();
}

}  // namespace tensorhub
