#include "cli/control_request.hpp"

#include <cstdint>
#include <set>
#include <vector>

#include "core/quoted.hpp"
#include "core/utf8.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/tensor.hpp"

namespace tensorhub::cli {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::size_t kMaxPathBytes = 4096;  // PATH_MAX

const std::set<std::string, std::less<>>& commands() {
  static const std::set<std::string, std::less<>> known{"status", "publish", "fetch", "digest", "release", "hold",
                                                         "wait_replicated", "wait_for_head", "stage", "commit",
                                                         "committed"};
  return known;
}

Status string_field(const Json& request, const char* key, std::string& out) {
  auto it = request.find(key);
  if (it == request.end() || it->is_null()) return Status::ok();
  if (!it->is_string()) return Status::invalid_argument(std::string("\"") + key + "\" must be a string");
  out = it->get<std::string>();
  if (out.find('\0') != std::string::npos) {
    return Status::invalid_argument(std::string("\"") + key + "\" holds a NUL byte");
  }
  return Status::ok();
}

Status uint_field(const Json& request, const char* key, std::uint64_t& out) {
  auto it = request.find(key);
  if (it == request.end() || it->is_null()) return Status::ok();
  if (!it->is_number_unsigned()) {
    return Status::invalid_argument(std::string("\"") + key + "\" must be a non-negative integer");
  }
  out = it->get<std::uint64_t>();
  return Status::ok();
}

Status bool_field(const Json& request, const char* key, bool& out) {
  auto it = request.find(key);
  if (it == request.end() || it->is_null()) return Status::ok();
  if (!it->is_boolean()) return Status::invalid_argument(std::string("\"") + key + "\" must be true or false");
  out = it->get<bool>();
  return Status::ok();
}

// `key` as text, or `key`_hex as the path's bytes in hex; absolute, no NUL.
Status path_field(const Json& request, const std::string& key, std::string& out) {
  std::string text, hex;
  TENSORHUB_RETURN_IF_ERROR(string_field(request, key.c_str(), text));
  TENSORHUB_RETURN_IF_ERROR(string_field(request, (key + "_hex").c_str(), hex));
  if (!text.empty() && !hex.empty()) {
    return Status::invalid_argument("give \"" + key + "\" or \"" + key + "_hex\", not both");
  }
  if (!hex.empty()) {
    if (hex.size() % 2 != 0 || hex.size() / 2 > kMaxPathBytes) {
      return Status::invalid_argument("\"" + key + "_hex\" must be an even number of hex digits, at most " +
                                      std::to_string(2 * kMaxPathBytes));
    }
    std::vector<std::uint8_t> bytes(hex.size() / 2);
    TENSORHUB_RETURN_IF_ERROR(from_hex(hex, bytes).with_context("\"" + key + "_hex\""));
    text.assign(bytes.begin(), bytes.end());
    if (text.find('\0') != std::string::npos) {
      return Status::invalid_argument("\"" + key + "_hex\" holds a NUL byte");
    }
  }
  if (text.empty()) return Status::ok();
  if (text.size() > kMaxPathBytes) {
    return Status::invalid_argument("\"" + key + "\" is longer than " + std::to_string(kMaxPathBytes) + " bytes");
  }
  if (text.front() != '/') {
    return Status::invalid_argument("\"" + key + "\" must be an absolute path, not " + core::quoted(text) +
                                    " (the client resolves a relative one)");
  }
  out = std::move(text);
  return Status::ok();
}

}  // namespace

// A selection: {"tensor": null | [[begin, end], ...], ...}.
Result<std::vector<TensorSelection>> selection_from_json(const Json& value, const std::string& what) {
  std::vector<TensorSelection> out;
  if (!value.is_object() || value.empty()) {
    return Status::invalid_argument(what + " must be an object of tensor names, naming at least one");
  }
  if (value.size() > kMaxSelectedTensors) {
    return Status::invalid_argument(what + " names more than " + std::to_string(kMaxSelectedTensors) + " tensors");
  }
  for (const auto& [name, ranges] : value.items()) {
    if (name.empty() || name.size() > kMaxTensorNameBytes || !core::is_valid_utf8(name) || name.find('\0') != std::string::npos) {
      return Status::invalid_argument(what + " names a tensor that is not UTF-8 of 1 to " +
                                      std::to_string(kMaxTensorNameBytes) + " bytes without NUL");
    }
    TensorSelection selected{name, {}};
    const std::string where = what + " tensor " + core::quoted(name);
    if (!ranges.is_null()) {
      if (!ranges.is_array() || ranges.size() > kMaxTensorRank) {
        return Status::invalid_argument(where + " must be null (whole) or a list of at most " +
                                        std::to_string(kMaxTensorRank) + " [begin, end] ranges");
      }
      for (const auto& range : ranges) {
        if (!range.is_array() || range.size() != 2 || !range[0].is_number_unsigned() ||
            !range[1].is_number_unsigned() || range[0].get<std::uint64_t>() >= range[1].get<std::uint64_t>()) {
          return Status::invalid_argument(where + ": each range must be [begin, end] with 0 <= begin < end");
        }
        selected.slice.ranges.push_back(IndexRange{range[0].get<std::uint64_t>(), range[1].get<std::uint64_t>()});
      }
    }
    out.push_back(std::move(selected));
  }
  return out;
}

namespace {

Status selection_fields(const Json& request, ControlRequest& r) {
  if (auto it = request.find("select"); it != request.end() && !it->is_null()) {
    auto select = selection_from_json(*it, "\"select\"");
    if (!select) return select.status();
    r.select = std::move(*select);
  }
  if (auto it = request.find("views"); it != request.end() && !it->is_null()) {
    if (!it->is_array() || it->size() > kMaxViews) {
      return Status::invalid_argument("\"views\" must be a list of at most " + std::to_string(kMaxViews) +
                                      " selections");
    }
    for (std::size_t i = 0; i < it->size(); ++i) {
      auto view = selection_from_json((*it)[i], "\"views\"[" + std::to_string(i) + "]");
      if (!view) return view.status();
      r.views.push_back(std::move(*view));
    }
  }
  return Status::ok();
}

}  // namespace

Result<ControlRequest> parse_control_request(std::string_view line) {
  const Json request = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object() || !request.contains("cmd") || !request["cmd"].is_string()) {
    return Status::invalid_argument("expected a JSON object with a \"cmd\" string");
  }
  ControlRequest r;
  r.cmd = request["cmd"].get<std::string>();
  if (commands().count(r.cmd) == 0) return Status::invalid_argument("unknown command " + core::quoted(r.cmd));
  TENSORHUB_RETURN_IF_ERROR(string_field(request, "model", r.model));
  TENSORHUB_RETURN_IF_ERROR(uint_field(request, "version", r.version));
  TENSORHUB_RETURN_IF_ERROR(path_field(request, "file", r.file));
  TENSORHUB_RETURN_IF_ERROR(path_field(request, "out", r.out));
  TENSORHUB_RETURN_IF_ERROR(uint_field(request, "wait_replicas", r.wait_replicas));
  TENSORHUB_RETURN_IF_ERROR(uint_field(request, "after", r.after));
  TENSORHUB_RETURN_IF_ERROR(uint_field(request, "part_index", r.part_index));
  TENSORHUB_RETURN_IF_ERROR(uint_field(request, "part_count", r.part_count));
  TENSORHUB_RETURN_IF_ERROR(bool_field(request, "release", r.release));
  TENSORHUB_RETURN_IF_ERROR(bool_field(request, "now", r.now));
  TENSORHUB_RETURN_IF_ERROR(string_field(request, "gpu", r.gpu));
  TENSORHUB_RETURN_IF_ERROR(selection_fields(request, r));
  TENSORHUB_RETURN_IF_ERROR(string_field(request, "group", r.group));
  TENSORHUB_RETURN_IF_ERROR(uint_field(request, "group_size", r.group_size));
  TENSORHUB_RETURN_IF_ERROR(uint_field(request, "group_rank", r.group_rank));
  // committed answers at once unless told to wait.
  if (r.cmd == "committed" && (!request.contains("timeout_ms") || request["timeout_ms"].is_null())) r.timeout_ms = 0;
  TENSORHUB_RETURN_IF_ERROR(uint_field(request, "timeout_ms", r.timeout_ms));
  if (r.timeout_ms > kMaxTimeoutMs) {
    return Status::invalid_argument("\"timeout_ms\" is at most " + std::to_string(kMaxTimeoutMs) + " (a day)");
  }
  if (r.cmd != "status" && r.cmd != "commit") {
    TENSORHUB_RETURN_IF_ERROR(validate_model_name(r.model).with_context("\"model\""));
  }
  if (r.cmd == "publish" && r.file.empty()) return Status::invalid_argument("publish needs \"file\"");
  if (r.part_count != 0 || r.part_index != 0) {
    if (r.cmd != "publish") return Status::invalid_argument("\"part_index\" and \"part_count\" go with publish only");
    if (r.part_count == 0 || r.part_count > kMaxParts || r.part_index >= r.part_count) {
      return Status::invalid_argument("a part is \"part_index\" below \"part_count\", which is 1 to " +
                                      std::to_string(kMaxParts));
    }
    if (r.version == 0) return Status::invalid_argument("a part names its \"version\" (from 1)");
  }
  if (r.cmd == "wait_replicated" && r.wait_replicas == 0) {
    return Status::invalid_argument("wait_replicated needs \"wait_replicas\" of at least 1");
  }
  if (!r.gpu.empty() && r.cmd != "hold") return Status::invalid_argument("\"gpu\" goes with \"hold\" only");
  if (!r.select.empty() && r.cmd != "fetch" && r.cmd != "stage") {
    return Status::invalid_argument("\"select\" goes with fetch and stage only");
  }
  const bool grouped = r.cmd == "stage" || r.cmd == "commit" || r.cmd == "committed";
  if (!grouped && (!r.group.empty() || r.group_size != 0 || r.group_rank != 0)) {
    return Status::invalid_argument(
        "\"group\", \"group_size\" and \"group_rank\" go with stage, commit and committed only");
  }
  if (grouped) {
    TENSORHUB_RETURN_IF_ERROR(validate_model_name(r.group).with_context("\"group\""));
  }
  if (r.cmd == "stage" || r.cmd == "commit") {
    if (r.version == 0) return Status::invalid_argument(r.cmd + " names its \"version\" (from 1): a group never takes the latest");
    if (r.timeout_ms == 0) return Status::invalid_argument("\"timeout_ms\" must be at least 1");
  }
  if (r.cmd == "committed" && r.version != 0) {
    return Status::invalid_argument("committed answers with a version and takes none");
  }
  if (r.cmd == "stage" && r.out.empty()) {
    return Status::invalid_argument("stage needs \"out\": the file the stage goes into");
  }
  if (r.cmd == "stage" || r.cmd == "committed") {
    // The group's own limits are the peer's to check (Peer::group).
    if (r.group_size == 0 || r.group_size > UINT32_MAX || r.group_rank >= r.group_size) {
      return Status::invalid_argument("a rank is \"group_rank\" below \"group_size\", which is at least 1");
    }
  }
  if (!r.views.empty() && (r.cmd != "publish" || r.part_count == 0)) {
    return Status::invalid_argument("\"views\" go with a part's publish only (\"part_count\")");
  }
  return r;
}

void put_path(Json& request, const std::string& key, const std::string& path) {
  if (core::is_valid_utf8(path)) {
    request[key] = path;
  } else {
    request[key + "_hex"] = to_hex(std::span(reinterpret_cast<const std::uint8_t*>(path.data()), path.size()));
  }
}

}  // namespace tensorhub::cli
