#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>

#include "core/file_io.hpp"
#include "core/mapped_file.hpp"
#include "core/mapped_output_file.hpp"
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

TEST_CASE("mapped output file: written in place, renamed on commit, removed when not committed") {
  TempDir dir;
  const std::string path = dir.file("out.bin");
  {
    auto file = core::MappedOutputFile::create(path, 1 << 20, 0644, false);
    REQUIRE_MESSAGE(file.is_ok(), file.status().to_string());
    CHECK(file->bytes().size() == (1u << 20));
    std::memset(file->bytes().data(), 0x5a, file->bytes().size());
    CHECK_FALSE(std::filesystem::exists(path));  // untouched until commit
    REQUIRE(file->commit().is_ok());
    CHECK(std::filesystem::exists(path));
    file->bytes()[0] = std::byte{1};  // the mapping stays valid after the rename
  }
  auto content = core::read_file(path, 2 << 20);
  REQUIRE(content.is_ok());
  REQUIRE(content->size() == (1u << 20));
  CHECK((*content)[0] == 1);
  CHECK((*content)[content->size() - 1] == 0x5a);
  // The final path exists: refused unless overwriting; an uncommitted file leaves nothing behind.
  CHECK(core::MappedOutputFile::create(path, 4096, 0644, false).status().code() == StatusCode::kAlreadyExists);
  {
    auto abandoned = core::MappedOutputFile::create(dir.file("gone.bin"), 4096, 0644, false);
    REQUIRE(abandoned.is_ok());
  }
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator{}) == 1);
  CHECK(core::MappedOutputFile::create(dir.file("empty.bin"), 0, 0644, false).status().code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("mapped output file: two files of one path never share a temporary, and discard() removes its name") {
  TempDir dir;
  const std::string path = dir.file("twice.bin");
  auto first = core::MappedOutputFile::create(path, 8192, 0644, true);
  auto second = core::MappedOutputFile::create(path, 8192, 0644, true);
  REQUIRE(first.is_ok());
  REQUIRE(second.is_ok());
  CHECK(first->fd() >= 0);
  std::memset(first->bytes().data(), 0x11, first->bytes().size());
  std::memset(second->bytes().data(), 0x22, second->bytes().size());
  CHECK(first->bytes()[0] == std::byte{0x11});  // the second did not truncate or overwrite the first
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator{}) == 2);
  // A discarded file's name goes at once; its mapping stays valid, and it can no longer be committed.
  second->discard();
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator{}) == 1);
  second->bytes()[0] = std::byte{3};
  CHECK(second->commit().code() == StatusCode::kInvalidArgument);
  REQUIRE(first->commit().is_ok());
  auto content = core::read_file(path, 1 << 20);
  REQUIRE(content.is_ok());
  CHECK((*content)[8191] == 0x11);
}
