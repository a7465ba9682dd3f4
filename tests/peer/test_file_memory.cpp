// FileMemory: a fetch's output file, written by pwrite rather than through
// its mapping.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <unistd.h>

#include "core/mapped_file.hpp"
#include "core/mapped_output_file.hpp"
#include "seams/file_memory.hpp"
#include "support/model_fixture.hpp"
#include "support/temp_dir.hpp"

using namespace tensorhub;
using namespace tensorhub::testing;

TEST_CASE("file memory: writes and copies into the mapped file go through the file, and a truncated source fails") {
  TempDir dir;
  const auto image = small_model(43, 1u << 20);
  auto output = core::MappedOutputFile::create(dir.file("out"), image.size(), 0644, /*overwrite=*/false);
  REQUIRE(output.is_ok());
  peer::FileDestination file(std::move(*output));
  const peer::MemoryDomain& domain = file.domain();
  CHECK(domain.host_accessible());
  CHECK_FALSE(domain.receives_in_place());  // payloads land through a host buffer and write()
  const core::MutableRegions mapping{file.bytes()};
  const std::span<const std::byte> all(image);

  // write(): by pwrite, seen through the mapping (one page cache).
  REQUIRE(domain.write(mapping, 0, all.first(100'000)));
  // copy(): from a source of two regions, split mid-range, into the file.
  const std::vector<ConstRegion> parts{all.first(500'000), all.subspan(500'000)};
  const core::ConstRegions source{std::span<const ConstRegion>(parts)};
  REQUIRE(domain.copy(source, mapping, 100'000, image.size() - 100'000));
  CHECK(std::equal(file.bytes().begin(), file.bytes().end(), image.begin(), image.end()));
  std::vector<std::byte> read_back(4096);
  REQUIRE(domain.read(mapping.as_const(), 777'777, read_back));
  CHECK(std::equal(read_back.begin(), read_back.end(), image.begin() + 777'777));

  // Memory that is not the file's mapping is written as host memory is.
  std::vector<std::byte> elsewhere(1000);
  const core::MutableRegions other{std::span<std::byte>(elsewhere)};
  REQUIRE(domain.write(other, 10, all.first(20)));
  CHECK(std::equal(elsewhere.begin() + 10, elsewhere.begin() + 30, image.begin()));
  REQUIRE(domain.copy(source, other, 0, elsewhere.size()));
  CHECK(std::equal(elsewhere.begin(), elsewhere.end(), image.begin()));

  // A source truncated under the copy fails it (EFAULT from pwrite, never
  // a fault in this process).
  const std::string path = dir.file("source");
  write_test_file(path, image);
  auto mapped = core::MappedFile::open(path);
  REQUIRE(mapped.is_ok());
  REQUIRE(::truncate(path.c_str(), 4096) == 0);
  CHECK_FALSE(domain.copy(core::ConstRegions(mapped->bytes()), mapping, 8192, 65536));
}

TEST_CASE("file memory: a write the file refuses names why: the file removed under it, or the file system's errno") {
  TempDir dir;
  const auto image = small_model(44, 256u << 10);
  auto output = core::MappedOutputFile::create(dir.file("out"), image.size(), 0644, /*overwrite=*/false);
  REQUIRE(output.is_ok());
  const std::string temporary = output->temporary_path();
  peer::FileDestination file(std::move(*output));
  const core::MutableRegions mapping{file.bytes()};
  const std::span<const std::byte> all(image);
  REQUIRE(file.domain().write(mapping, 0, all.first(4096)).is_ok());
  // Removed under the fetch (its last name gone): stop, naming it.
  REQUIRE(::unlink(temporary.c_str()) == 0);
  const Status removed = file.domain().write(mapping, 4096, all.subspan(4096, 4096));
  CHECK(removed.code() == StatusCode::kIoError);
  CHECK(removed.message().find("removed") != std::string::npos);
  const std::vector<ConstRegion> parts{all};
  const Status copy_removed = file.domain().copy(core::ConstRegions{std::span<const ConstRegion>(parts)}, mapping, 0, 4096);
  CHECK(copy_removed.code() == StatusCode::kIoError);
  // The file's owner hears the fetch failed: the name is gone, the commit refused.
  file.fetch_failed();
  CHECK(file.commit().code() == StatusCode::kCancelled);
}

TEST_CASE("mapped output file: the temporary names it gives an output are recognised, long ones cut too") {
  TempDir dir;
  const std::string out = dir.file("policy.safetensors");
  auto file = core::MappedOutputFile::create(out, 4096, 0644, /*overwrite=*/true);
  REQUIRE(file.is_ok());
  const std::string name = std::filesystem::path(file->temporary_path()).filename().string();
  CHECK(core::MappedOutputFile::temporary_owner(name, out) == static_cast<long>(::getpid()));
  CHECK_FALSE(core::MappedOutputFile::temporary_owner(name, dir.file("other.safetensors")));
  CHECK_FALSE(core::MappedOutputFile::temporary_owner("policy.safetensors.partial-x-1", out));
  CHECK_FALSE(core::MappedOutputFile::temporary_owner("policy.safetensors", out));
  const std::string long_out = dir.file(std::string(250, 'w'));
  auto long_file = core::MappedOutputFile::create(long_out, 4096, 0644, /*overwrite=*/true);
  REQUIRE(long_file.is_ok());
  const std::string long_name = std::filesystem::path(long_file->temporary_path()).filename().string();
  CHECK(long_name.size() <= 255);
  CHECK(core::MappedOutputFile::temporary_owner(long_name, long_out) == static_cast<long>(::getpid()));
}
