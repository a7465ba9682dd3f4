// Host memory reads of a published file that another process truncates:
// every read fails cleanly (false, a digest of zeros, a build error) instead
// of the SIGBUS that would kill the peer.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <unistd.h>

#include "core/bus_error_guard.hpp"
#include "core/mapped_file.hpp"
#include "core/regions.hpp"
#include "seams/memory_domain.hpp"
#include "support/model_fixture.hpp"
#include "support/temp_dir.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;

TEST_CASE("bus error guard: a read of a truncated mapping fails, the process lives, and guards nest") {
  TempDir dir;
  const std::string path = dir.file("weights");
  write_test_file(path, std::vector<std::byte>(1u << 20, std::byte{7}));
  auto file = core::MappedFile::open(path);
  REQUIRE(file.is_ok());
  const std::span<const std::byte> bytes = file->bytes();
  std::uint64_t sum = 0;
  CHECK(core::read_guarded([&] { sum = static_cast<std::uint64_t>(bytes[bytes.size() - 1]); }));
  CHECK(sum == 7);
  REQUIRE(::truncate(path.c_str(), 0) == 0);
  std::byte copy[4096];
  for (int i = 0; i < 3; ++i) {  // the handler stays armed after a recovery
    CHECK_FALSE(core::read_guarded([&] { std::memcpy(copy, bytes.data() + 8192, sizeof copy); }));
  }
  bool inner_failed = false;
  CHECK(core::read_guarded([&] {
    inner_failed = !core::read_guarded([&] { std::memcpy(copy, bytes.data(), sizeof copy); });
  }));
  CHECK(inner_failed);
}

TEST_CASE("host memory: shards of a published file truncated under it fail to verify, copy, prove or publish") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const auto image = small_model(41, 1u << 20);
  write_test_file(path, image);
  const Manifest manifest = build_small(image, test_identity(1));
  auto file = core::MappedFile::open(path);
  REQUIRE(file.is_ok());
  const core::ConstRegions mapped(file->bytes());
  const peer::MemoryDomain& host = peer::host_memory();
  const ShardIndex last{static_cast<std::uint32_t>(manifest.shard_count() - 1)};
  REQUIRE(host.verify_shard(manifest, last, mapped));
  std::vector<std::byte> out(image.size());
  const core::MutableRegions destination{std::span<std::byte>(out)};
  REQUIRE(peer::copy_verified_shard(host, manifest, last, mapped, destination));
  const std::vector<std::uint8_t> nonce(32, 1);
  const std::uint32_t length = static_cast<std::uint32_t>(std::min<std::uint64_t>(manifest.shard(last).byte_length, 4096));
  const peer::ByteRange range{manifest.shard(last).byte_offset, length};
  const auto proof = host.digest_ranges(nonce, std::span(&range, 1), mapped);
  CHECK(proof != core::Blake2bDigest{});

  REQUIRE(::truncate(path.c_str(), 4096) == 0);  // the trainer rewrites its checkpoint
  CHECK_FALSE(host.verify_shard(manifest, last, mapped));
  CHECK_FALSE(peer::copy_verified_shard(host, manifest, last, mapped, destination));
  CHECK_FALSE(host.copy(mapped, destination, manifest.shard(last).byte_offset, length));
  CHECK(host.digest_ranges(nonce, std::span(&range, 1), mapped) == core::Blake2bDigest{});
  auto rebuilt = build_manifest(small_options(), file->bytes(), tensors_of(image), test_identity(1));
  REQUIRE_FALSE(rebuilt.is_ok());
  CHECK(rebuilt.status().code() == StatusCode::kIoError);
}
