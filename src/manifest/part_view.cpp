#include "manifest/part_view.hpp"

#include <map>
#include <string_view>

#include "core/hash.hpp"
#include "core/msgpack_writer.hpp"
#include "manifest/manifest_codec.hpp"
#include "manifest/selection.hpp"
#include "manifest/slice_algebra.hpp"

namespace tensorhub::manifest {

Result<PartView> part_view(const Manifest& part, std::span<const TensorEntry> selected) {
  return part_view(part.tensors(), part.total_size(), selected, image_name(part));
}

Result<PartView> part_view(std::span<const TensorEntry> image_tensors, std::uint64_t total_size,
                           std::span<const TensorEntry> selected, std::string_view what) {
  auto runs = selection_runs(image_tensors, total_size, selected, what);
  if (!runs) return runs.status();
  PartView view;
  std::map<std::string_view, const TensorEntry*> by_name;
  for (const TensorEntry& s : selected) by_name.emplace(s.name, &s);
  for (const TensorEntry& t : image_tensors) {  // in offset order: the order of the view's bytes
    auto it = by_name.find(t.name);
    if (it == by_name.end() || t.byte_length == 0) continue;
    const auto both = intersect(t.slice(), it->second->slice());
    if (!both) continue;
    TensorEntry e{t.name, t.dtype, both->shape(), view.size, both->element_count() * dtype_size(t.dtype)};
    e.global_shape = t.whole_shape();
    for (const IndexRange& r : both->ranges) e.slice_begin.push_back(r.begin);
    view.size += e.byte_length;
    view.tensors.push_back(std::move(e));
  }
  // The intersections' elements, in row-major order tensor after tensor,
  // are the selected runs in increasing part offset (selection_runs walks
  // them so): the view is those runs back to back.
  LandingRunList gather;
  std::uint64_t at = 0;
  for (const LandingRun& r : *runs) {
    if (r.whole_offset == kNoWholeOffset || r.length == 0) continue;
    gather.add(r.part_offset, at, r.length);
    at += r.length;
  }
  view.gather = gather.take();
  std::vector<std::uint8_t> table;
  core::MsgpackWriter w(table);
  manifest_detail::write_tensor_table(w, view.tensors);
  const core::Blake2bDigest digest = core::blake2b_256(std::as_bytes(std::span(table)));
  std::copy(digest.begin(), digest.end(), view.key.bytes.begin());
  return view;
}

}  // namespace tensorhub::manifest
