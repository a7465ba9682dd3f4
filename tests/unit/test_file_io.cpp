#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>

#include "core/file_io.hpp"
#include "core/mapped_file.hpp"
#include "support/temp_dir.hpp"

using namespace tensorhub;
using tensorhub::testing::TempDir;

namespace {
std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s)); }
}  // namespace

TEST_CASE("file io: atomic write, overwrite rule, bounded read") {
  TempDir dir;
  const std::string path = dir.file("a.bin");
  REQUIRE(core::write_file_atomic(path, bytes_of("hello"), 0640, false).is_ok());
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
  Status again = core::write_file_atomic(path, bytes_of("other"), 0640, false);
  CHECK(again.code() == StatusCode::kAlreadyExists);
  auto content = core::read_file(path, 100);
  REQUIRE(content.is_ok());
  CHECK(std::string(content->begin(), content->end()) == "hello");
  REQUIRE(core::write_file_atomic(path, bytes_of("replaced"), 0640, true).is_ok());
  content = core::read_file(path, 100);
  CHECK(std::string(content->begin(), content->end()) == "replaced");
  CHECK(core::read_file(path, 3).status().code() == StatusCode::kInvalidArgument);
  CHECK(core::read_file(dir.file("missing"), 3).status().code() == StatusCode::kNotFound);
  CHECK_FALSE(core::read_file(dir.path().string(), 3).is_ok());  // a directory
  // No temporary files are left behind.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("file io: an uncommitted writer leaves nothing") {
  TempDir dir;
  {
    auto w = core::AtomicFileWriter::create(dir.file("x"), 0644, false);
    REQUIRE(w.is_ok());
    REQUIRE(w->append(bytes_of("partial")).is_ok());
  }
  CHECK(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("file io: mapped files") {
  TempDir dir;
  REQUIRE(core::write_file_atomic(dir.file("m"), bytes_of("mapped!"), 0644, false).is_ok());
  auto m = core::MappedFile::open(dir.file("m"));
  REQUIRE(m.is_ok());
  CHECK(m->bytes().size() == 7);
  CHECK(static_cast<char>(m->bytes()[6]) == '!');
  core::MappedFile moved = std::move(*m);
  CHECK(moved.bytes().size() == 7);
  REQUIRE(core::write_file_atomic(dir.file("empty"), {}, 0644, false).is_ok());
  auto e = core::MappedFile::open(dir.file("empty"));
  REQUIRE(e.is_ok());
  CHECK(e->bytes().empty());
  CHECK(core::MappedFile::open(dir.file("nope")).status().code() == StatusCode::kNotFound);
}
