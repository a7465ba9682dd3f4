// The canonical encoding of manifests (internal to src/manifest/).
//
// A .manifest file is a msgpack array of two: [body, signature].
//   body: a map with exactly these keys, in this order:
//     "format"     1
//     "model"      str
//     "version"    uint
//     "part"       [index uint, count uint]: only in a part's manifest
//     "parent"     bin(32), all zero for a first version
//     "created_ms" uint, Unix milliseconds
//     "publisher"  bin(32), Ed25519 public key
//     "shard_hash" "xxh3-128" | "blake2b-256"
//     "shard_size" uint, a power of two in [64 KiB, 1 GiB]
//     "total_size" uint
//     "tensors"    array of [name str, dtype str, shape [uint...], offset uint, length uint],
//                  sorted by (offset, length); a slice of a larger tensor (in a
//                  part's manifest) adds [global shape [uint...], slice start [uint...]]
//     "shards"     array of [offset uint, length uint, digest bin]
//   signature: bin(64), Ed25519 over kSigningDomain || id
// The id is BLAKE2b-256 of the body's bytes. Every value takes its shortest
// msgpack form, and "part" and a tensor's slice appear exactly when they are
// set, so one body has exactly one encoding (a whole version's manifest is
// encoded as before parts existed).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "tensorhub/manifest.hpp"

namespace tensorhub {
namespace core {
class MsgpackWriter;
}

namespace manifest_detail {

inline constexpr std::uint64_t kFormatVersion = 1;
inline constexpr std::string_view kSigningDomain{"tensorhub manifest v1\0", 22};

std::vector<std::uint8_t> encode_body(const ManifestBody& body);
// A tensor table as the body's "tensors" holds it.
void write_tensor_table(core::MsgpackWriter& w, std::span<const TensorEntry> tensors);
// Strictly decodes what write_tensor_table wrote, alone (at most kMaxTensors
// entries, every entry's fields bounded). Errors: kCorrupt naming the field.
Result<std::vector<TensorEntry>> read_tensor_table(std::span<const std::uint8_t> encoded);
// A signed record's id (a manifest's, a seal's): BLAKE2b-256 of its body's bytes.
ManifestId compute_manifest_id(std::span<const std::uint8_t> body_bytes);
// The bytes a publisher signs for a record's id: `domain` (its NUL
// included), then the id. Each kind of record has its own domain.
std::vector<std::uint8_t> signing_message(std::string_view domain, const ManifestId& id);
// The bytes the publisher signs for a manifest id.
inline std::vector<std::uint8_t> signing_message(const ManifestId& id) { return signing_message(kSigningDomain, id); }
// A signed record's encoding: a msgpack array of [body, signature], the
// body's bytes as they are.
std::vector<std::uint8_t> signed_encoding(std::span<const std::uint8_t> body_bytes, const Signature& signature);
// Every semantic rule of a body: names, limits, tiling, digests, tensors.
Status validate_body(const ManifestBody& body);

}  // namespace manifest_detail

// Builds Manifest objects; the only way to make one.
struct ManifestAccess {
  // REQUIRES: body_bytes == encode_body(body), and body passed validate_body.
  static Manifest assemble(ManifestBody body, std::span<const std::uint8_t> body_bytes, const Signature& signature);
  // A view's manifest (manifest::view_manifest): no signature, no encoding.
  // REQUIRES: body passed validate_body.
  static Manifest assemble_view(ManifestBody body, const ManifestId& id);
};

}  // namespace tensorhub
