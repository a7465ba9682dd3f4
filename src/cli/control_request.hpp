// The requests of the daemon's control protocol: one JSON object per line,
// decoded strictly into a ControlRequest, or refused with a one-line reason.
// The CLI and the Python client build them; the daemon decodes them here
// (and tests/fuzz/fuzz_control_request feeds this decoder hostile lines).
//
// Paths travel as JSON strings when they are UTF-8, and as "<key>_hex" (the
// path's bytes in hex) when they are not: any Linux file name works. A path
// is absolute (the client resolves a relative one, never the daemon) and
// holds no NUL byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensorhub/status.hpp"
#include "tensorhub/tensor_slice.hpp"

namespace tensorhub::cli {

struct ControlRequest {
  // status, publish, fetch, digest, release, hold, wait_replicated, wait_for_head, stage, commit, committed
  std::string cmd;
  std::string model;
  std::uint64_t version = 0;  // 0: the head (where the command takes one)
  std::string file, out, gpu;
  std::uint64_t wait_replicas = 0;
  std::uint64_t after = 0;  // wait_for_head: a head newer than this
  // publish: part `part_index` of `part_count` of v`version` (count 0: a whole version, the next number).
  std::uint64_t part_index = 0, part_count = 0;
  bool release = false, now = false;
  // fetch: a selection (Peer::fetch_selection's) rather than the whole
  // version. JSON: {"tensor": [[begin, end], ...] (one range a dimension),
  // or null (the whole tensor), ...}.
  std::vector<TensorSelection> select;
  // publish of a part: the selections whose views the part declares
  // (PartOptions::views). JSON: a list of selections as "select".
  std::vector<std::vector<TensorSelection>> views;
  // stage: this daemon is rank `group_rank` of `group_size` of group
  // `group` (Peer::group), and stages `model` v`version` (or a selection)
  // into `out` for it. commit: commits v`version` for `group`, waiting up
  // to `timeout_ms`. committed: the version of `model` that `group`
  // committed (Group::committed), joining it as stage does, waiting up to
  // `timeout_ms` (default 0) for a rank to say one.
  std::string group;
  std::uint64_t group_size = 0, group_rank = 0;
  std::uint64_t timeout_ms = 60'000;
};

inline constexpr std::size_t kMaxSelectedTensors = 1u << 16;  // a selection's tensors, in one request
inline constexpr std::uint64_t kMaxTimeoutMs = 86'400'000;     // "timeout_ms": a day

// Decodes one request line (without its newline). Errors: kInvalidArgument
// naming what is wrong: not a JSON object, an unknown command or field of
// the wrong type, a string with a NUL byte, a relative path, a path given
// both ways, a model name that breaks the rule, "gpu" with a command other
// than hold, wait_replicated without "wait_replicas" of at least 1, a part
// (publish with "part_count") without "version" or with an index not below
// its count, or a count above kMaxParts; "select" with a command other than
// fetch, or "views" with one other than a part's publish; a selection that
// is not an object of tensor names (non-empty, UTF-8, at most
// kMaxTensorNameBytes) to null or a list of at most kMaxTensorRank
// [begin, end] pairs of non-negative integers with begin < end, that names
// no tensor or more than kMaxSelectedTensors, or more than kMaxViews views;
// stage without "version", "out", or a group ("group" by the model-name
// rule, "group_rank" below "group_size"; the peer checks the group's own
// limits); commit without "group" or "version"; a "timeout_ms" of 0 for
// stage or commit; committed without a group (as stage's) or with a
// "version"; a "timeout_ms" above kMaxTimeoutMs; a group's fields with
// another command.
Result<ControlRequest> parse_control_request(std::string_view line);

// A selection in the protocol's JSON form ("select", and each of "views").
// Errors: kInvalidArgument as parse_control_request's for "select", the
// message starting with `what`.
Result<std::vector<TensorSelection>> selection_from_json(const nlohmann::ordered_json& value, const std::string& what);

// Puts `path` into `request` under `key`, or under `key` + "_hex" when it is
// not UTF-8.
void put_path(nlohmann::ordered_json& request, const std::string& key, const std::string& path);

}  // namespace tensorhub::cli
