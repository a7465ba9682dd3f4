// The JSON lines a daemon answers control requests with: each request's
// last line has "done": true and "ok"; progress and events come before it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tensorhub/peer.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::cli {

using Json = nlohmann::ordered_json;

// One line of an answer: invalid UTF-8 (there should be none) is replaced,
// never thrown.
inline std::string line(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// "code" names the kind (tensorhub.Error's codes: invalid_argument,
// not_found, io_error, ...), "error" the one-line reason.
inline Json error_line(const Status& s) {
  return Json{{"done", true}, {"ok", false}, {"error", s.to_string()}, {"code", status_code_id(s.code())}};
}

inline Json progress_line(const FetchProgressInfo& p) {
  return Json{{"event", "progress"}, {"bytes_verified", p.bytes_verified}, {"bytes_total", p.bytes_total},
              {"shards_verified", p.shards_verified}, {"shards_total", p.shards_total}, {"sources", p.sources}};
}

}  // namespace tensorhub::cli
