// The seal: the small signed record that makes a version published in parts
// a version. It names every part's manifest in part order and chains to the
// parent version; its id (BLAKE2b-256 of the canonical encoding of its
// body) is the version's id. The body holds only what the seal joins, not
// who signed it: any part's publisher may seal once it knows every part's
// id, and the seals two publishers make of the same parts are one version
// with one id. Two seals of one (model, version) with different ids are
// equivocation. A version in parts is visible only once sealed.
//
// Encoding: a msgpack array [body, publisher bin(32), signature bin(64)];
// body: a map with exactly the keys "seal" (the format, 1), "model" str,
// "version" uint, "parent" bin(32), "parts" array of bin(32), in that
// order, each value in its shortest form. The publisher signs
// "tensorhub seal v1\0" || id, so no manifest signature passes for a
// seal's, nor the other way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensorhub/identity.hpp"
#include "tensorhub/ids.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/status.hpp"

namespace tensorhub {

// The largest seal encoding a decoder takes: kMaxParts parts, with room.
inline constexpr std::size_t kMaxSealBytes = std::size_t{4} << 20;

// What a seal joins: the version's identity (its id is this body's hash).
struct SealBody {
  std::string model;
  std::uint64_t version = 0;
  ManifestId parent;  // the parent version's id; all zero for a first version
  std::vector<ManifestId> parts;  // part i's manifest id, for i from 0

  friend bool operator==(const SealBody&, const SealBody&) = default;
};

// A decoded, structurally valid seal. Holding one says nothing about trust:
// verify_seal_signature() first.
class Seal {
 public:
  const SealBody& body() const { return body_; }
  const ManifestId& id() const { return id_; }
  const PublicKey& publisher() const { return publisher_; }
  const Signature& signature() const { return signature_; }
  // The complete signed encoding.
  std::span<const std::uint8_t> encoded() const { return encoded_; }

 private:
  friend struct SealAccess;
  SealBody body_;
  ManifestId id_;
  PublicKey publisher_;
  Signature signature_;
  std::vector<std::uint8_t> encoded_;
};

// Signs `body` as `publisher`. Errors: kInvalidArgument (a bad model name,
// a nonzero parent for version 0, no parts or more than kMaxParts, or a
// part named twice).
Result<Seal> make_seal(SealBody body, const Identity& publisher);

// Strictly decodes a seal: exact structure, canonical encodings only, no
// trailing bytes, at most kMaxParts parts (checked before allocating).
// Errors: kCorrupt (the first rule the bytes break, in one line).
Result<Seal> decode_seal(std::span<const std::uint8_t> encoded);

// Errors: kVerifyFailed (its publisher is not in `trusted`, or the signature
// does not verify).
Status verify_seal_signature(const Seal& seal, std::span<const PublicKey> trusted);

// Checks that `parts` are the manifests `seal` names, in part order, and
// that together they describe one model: each part's manifest has the
// seal's model, version and parent and says it is part i of the seal's count; a
// tensor has one dtype and one whole shape in every part that holds it; and
// the parts cover every element of every tensor exactly once.
// Errors: kVerifyFailed (the first rule broken, naming the part or the
// tensor: two parts that overlap, or how many elements no part holds).
Status check_sealed_parts(const Seal& seal, std::span<const Manifest* const> parts);

}  // namespace tensorhub
