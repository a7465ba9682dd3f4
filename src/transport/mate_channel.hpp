// The local channel between peers of one host: a peer asks a host mate for
// the memory of a version it holds (GPU memory, shared by CUDA IPC), copies
// the version's shards from it device to device, and verifies them before
// it holds them (LocalVersion::host_mate, CopyFromMate).
//
// Each peer listens on the abstract Unix socket named by mate_socket_name()
// (in its network namespace; the kernel checks nothing else, so the holder
// serves only processes of its own user, and the asker talks only to a
// process of its own user, both by SO_PEERCRED; the shards copied are
// verified against the manifest all the same). A request is one
// line, the version's manifest id in hex; the answer is "ok N" and N lines
// "HANDLE OFFSET LENGTH" (the handle in 128 hex digits), or "error WHY".
// The holder keeps the memory (a lease on the version) until the asker
// closes the connection, or for at most kMateLeaseSeconds.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "seams/shared_range.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub::peer {

inline constexpr int kMateLeaseSeconds = 60;
inline constexpr std::size_t kMaxMateRanges = 65536;
inline constexpr std::size_t kMaxMateRequestBytes = 2 * 32 + 1;

// "\0tensorhub-mate-<peer id, 32 hex>@<its data address>": an abstract
// socket address. The data address (host:port, a bound port) keeps two
// processes with one identity (tests run many) from colliding.
std::string mate_socket_name(const PeerId& peer, const std::string& data_addr);

std::string encode_mate_request(const ManifestId& id);
// Errors: kCorrupt (not 64 hex digits and a newline).
Result<ManifestId> decode_mate_request(std::string_view line);

std::string encode_mate_answer(const std::vector<SharedRange>& ranges);
std::string encode_mate_refusal(std::string_view why);
// The ranges of an answer, checked: at most kMaxMateRanges, none empty,
// lengths summing to `total` (the version's size). Errors: kCorrupt (a
// malformed answer), kUnavailable (a refusal, with the holder's reason).
Status decode_mate_answer(std::string_view text, std::uint64_t total, std::vector<SharedRange>& out);

// Asks `mate` for the memory of version `id` (of `total` bytes), blocking
// for at most `timeout_ms` at each step. On success `connection` is the open
// socket: close it once the copy is done, and the mate lets go of its lease.
// Errors: kUnavailable (no such mate on this host, or it refused), kCorrupt,
// kTimeout.
Status ask_mate(const PeerId& mate, const std::string& data_addr, const ManifestId& id, std::uint64_t total,
                int timeout_ms, std::vector<SharedRange>& ranges, int& connection);

}  // namespace tensorhub::peer
