// FileMemory: a fetch's output file, written by pwrite rather than through
// its mapping.
#include <doctest/doctest.h>

#include <algorithm>
#include <unistd.h>

#include "core/mapped_file.hpp"
#include "core/mapped_output_file.hpp"
#include "peer/file_memory.hpp"
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
