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

#include <nlohmann/json.hpp>

#include "tensorhub/status.hpp"

namespace tensorhub::cli {

struct ControlRequest {
  std::string cmd;  // status, publish, fetch, digest, release, hold, wait_replicated, wait_for_head
  std::string model;
  std::uint64_t version = 0;  // 0: the head (where the command takes one)
  std::string file, out, gpu;
  std::uint64_t wait_replicas = 0;
  std::uint64_t after = 0;  // wait_for_head: a head newer than this
  // publish: part `part_index` of `part_count` of v`version` (count 0: a whole version, the next number).
  std::uint64_t part_index = 0, part_count = 0;
  bool release = false, now = false;
};

// Decodes one request line (without its newline). Errors: kInvalidArgument
// naming what is wrong: not a JSON object, an unknown command or field of
// the wrong type, a string with a NUL byte, a relative path, a path given
// both ways, a model name that breaks the rule, "gpu" with a command other
// than hold, wait_replicated without "wait_replicas" of at least 1, a part
// (publish with "part_count") without "version" or with an index not below
// its count, or a count above kMaxParts.
Result<ControlRequest> parse_control_request(std::string_view line);

// Puts `path` into `request` under `key`, or under `key` + "_hex" when it is
// not UTF-8.
void put_path(nlohmann::ordered_json& request, const std::string& key, const std::string& path);

}  // namespace tensorhub::cli
