// libFuzzer target: the daemon's control request decoder on arbitrary lines.
// It must accept only what keeps the protocol's rules, and refuse everything
// else with kInvalidArgument and a one-line reason; nothing may crash.
#include <cstdlib>
#include <string_view>

#include "cli/control_request.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/tensor.hpp"

using namespace tensorhub;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  auto request = cli::parse_control_request(line);
  if (!request) {
    const Status& s = request.status();
    if (s.code() != StatusCode::kInvalidArgument || s.message().empty()) std::abort();
    if (s.message().find('\n') != std::string::npos) std::abort();
    return 0;
  }
  for (const std::string* path : {&request->file, &request->out}) {
    if (path->empty()) continue;
    if (path->front() != '/' || path->find('\0') != std::string::npos) std::abort();
  }
  if (request->cmd != "status" && request->cmd != "commit" && !validate_model_name(request->model).is_ok()) std::abort();
  const bool grouped = request->cmd == "stage" || request->cmd == "commit" || request->cmd == "committed";
  if (grouped && !validate_model_name(request->group).is_ok()) std::abort();
  if ((request->cmd == "stage" || request->cmd == "commit") && request->version == 0) std::abort();
  if (request->cmd == "committed" && request->version != 0) std::abort();
  if (!grouped && !request->group.empty()) std::abort();
  if (request->cmd == "stage" && request->out.empty()) std::abort();
  if ((request->cmd == "stage" || request->cmd == "committed") && request->group_rank >= request->group_size) std::abort();
  if (!request->gpu.empty() && request->cmd != "hold") std::abort();
  if (!request->select.empty() && request->cmd != "fetch" && request->cmd != "stage") std::abort();
  if (!request->views.empty() && (request->cmd != "publish" || request->part_count == 0)) std::abort();
  if (request->select.size() > cli::kMaxSelectedTensors || request->views.size() > kMaxViews) std::abort();
  for (const auto& selection : request->views) {
    if (selection.empty() || selection.size() > cli::kMaxSelectedTensors) std::abort();
  }
  for (const TensorSelection& t : request->select) {
    if (t.tensor.empty() || t.slice.ranges.size() > kMaxTensorRank) std::abort();
    for (const IndexRange& r : t.slice.ranges) {
      if (r.begin >= r.end) std::abort();
    }
  }
  return 0;
}
