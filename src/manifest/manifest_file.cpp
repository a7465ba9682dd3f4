#include "core/file_io.hpp"
#include "tensorhub/manifest.hpp"

namespace tensorhub {

Result<Manifest> read_manifest_file(const std::string& path) {
  auto bytes = core::read_file(path, kMaxManifestBytes);
  if (!bytes) return bytes.status();
  auto manifest = decode_manifest(*bytes);
  if (!manifest) return manifest.status().with_context(path);
  return manifest;
}

Status write_manifest_file(const Manifest& manifest, const std::string& path) {
  return core::write_file_atomic(path, std::as_bytes(manifest.encoded()), 0644, /*overwrite=*/true);
}

}  // namespace tensorhub
