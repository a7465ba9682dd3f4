// A version this peer knows by its signed record: a whole version's
// manifest, or a version in parts' seal joined with its parts'
// manifests (manifest/sealed_version.hpp). What the head tracker believes,
// chains and holds as proof of equivocation, whichever the kind.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/version_number.hpp"
#include "manifest/sealed_version.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/version_info.hpp"

namespace tensorhub::peer {

class KnownVersion {
 public:
  // REQUIRES: not null.
  explicit KnownVersion(std::shared_ptr<const Manifest> whole) : whole_(std::move(whole)) {}
  explicit KnownVersion(std::shared_ptr<const manifest::SealedVersion> sealed) : sealed_(std::move(sealed)) {}

  bool in_parts() const { return sealed_ != nullptr; }
  // The whole version's manifest; null for a version in parts.
  const std::shared_ptr<const Manifest>& manifest() const { return whole_; }
  // The version in parts; null for a whole one.
  const std::shared_ptr<const manifest::SealedVersion>& sealed() const { return sealed_; }

  const std::string& model() const { return whole_ ? whole_->model() : sealed_->model(); }
  std::uint64_t version() const { return whole_ ? whole_->version() : sealed_->version(); }
  VersionNumber number() const { return VersionNumber{version()}; }
  const ManifestId& id() const { return whole_ ? whole_->id() : sealed_->id(); }
  const ManifestId& parent() const { return whole_ ? whole_->parent() : sealed_->parent(); }
  const PublicKey& publisher() const { return whole_ ? whole_->publisher() : sealed_->publisher(); }
  std::uint64_t total_size() const { return whole_ ? whole_->total_size() : sealed_->total_size(); }
  // The signed bytes: the manifest's encoding, or the seal's.
  std::span<const std::uint8_t> encoded() const { return whole_ ? whole_->encoded() : sealed_->seal().encoded(); }
  VersionInfo info() const { return VersionInfo{model(), version(), id(), total_size()}; }

 private:
  std::shared_ptr<const Manifest> whole_;
  std::shared_ptr<const manifest::SealedVersion> sealed_;
};

// Checks that `child` extends `parent`: the same model, child names
// parent's id, and a larger number (verify_manifest_chain, for either kind).
// Errors: kVerifyFailed (the first of these that fails).
Status verify_chain(const KnownVersion& parent, const KnownVersion& child);

}  // namespace tensorhub::peer
