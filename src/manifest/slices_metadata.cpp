#include "manifest/slices_metadata.hpp"

#include <map>

#include <nlohmann/json.hpp>

#include "core/quoted.hpp"

namespace tensorhub::manifest {
namespace {

Status index_list(const nlohmann::json& j, const std::string& what, std::vector<std::uint64_t>& out) {
  if (!j.is_array() || j.size() > kMaxTensorRank) {
    return Status::invalid_argument(what + " must be a list of at most " + std::to_string(kMaxTensorRank) +
                                    " non-negative integers");
  }
  out.clear();
  for (const auto& d : j) {
    if (!d.is_number_unsigned()) return Status::invalid_argument(what + " must hold non-negative integers");
    out.push_back(d.get<std::uint64_t>());
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<TensorEntry>> part_tensors(const SafetensorsLayout& layout) {
  std::vector<TensorEntry> tensors = layout.tensors;
  const std::string* text = nullptr;
  for (const auto& [key, value] : layout.metadata) {
    if (key == kSlicesMetadataKey) text = &value;
  }
  if (text == nullptr) return tensors;
  const std::string where = "metadata " + core::quoted(std::string(kSlicesMetadataKey));
  const auto slices = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!slices.is_object()) return Status::invalid_argument(where + " must be a JSON object of tensor names");
  std::map<std::string, TensorEntry*, std::less<>> by_name;
  for (TensorEntry& t : tensors) by_name.emplace(t.name, &t);
  for (const auto& [name, slice] : slices.items()) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return Status::invalid_argument(where + " names " + core::quoted(name) + ", which the file does not hold");
    }
    if (!slice.is_object() || slice.size() != 2 || !slice.contains("global_shape") || !slice.contains("begin")) {
      return Status::invalid_argument(where + ": " + core::quoted(name) +
                                      " must be {\"global_shape\": [...], \"begin\": [...]}");
    }
    TENSORHUB_RETURN_IF_ERROR(index_list(slice["global_shape"], where + ": " + core::quoted(name) + " global_shape",
                                         it->second->global_shape));
    TENSORHUB_RETURN_IF_ERROR(
        index_list(slice["begin"], where + ": " + core::quoted(name) + " begin", it->second->slice_begin));
  }
  return tensors;
}

std::string slices_metadata(std::span<const TensorEntry> tensors) {
  nlohmann::ordered_json slices = nlohmann::ordered_json::object();
  for (const TensorEntry& t : tensors) {
    if (!t.is_slice()) continue;
    slices[t.name] = {{"global_shape", t.global_shape}, {"begin", t.slice_begin}};
  }
  return slices.empty() ? std::string() : slices.dump();
}

}  // namespace tensorhub::manifest
