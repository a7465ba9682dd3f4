#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "core/secret_file.hpp"
#include "support/temp_dir.hpp"
#include "tensorhub/identity.hpp"

using namespace tensorhub;
using tensorhub::testing::TempDir;

namespace {
std::span<const std::uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}
}  // namespace

TEST_CASE("identity: signatures verify only for the signer and the message") {
  Identity a = Identity::generate();
  Identity b = Identity::generate();
  CHECK(a.public_key() != b.public_key());
  const Signature sig = a.sign(bytes_of("message"));
  CHECK(verify_signature(a.public_key(), bytes_of("message"), sig));
  CHECK_FALSE(verify_signature(b.public_key(), bytes_of("message"), sig));
  CHECK_FALSE(verify_signature(a.public_key(), bytes_of("messagE"), sig));
  Signature bad = sig;
  bad.bytes[10] ^= 1;
  CHECK_FALSE(verify_signature(a.public_key(), bytes_of("message"), bad));
}

TEST_CASE("identity: seeds are deterministic") {
  std::array<std::uint8_t, 32> seed{};
  seed[0] = 7;
  CHECK(Identity::from_seed(seed).public_key() == Identity::from_seed(seed).public_key());
  seed[1] = 1;
  std::array<std::uint8_t, 32> other{};
  CHECK(Identity::from_seed(seed).public_key() != Identity::from_seed(other).public_key());
}

TEST_CASE("identity: key files are written 0600 and load back") {
  TempDir dir;
  const std::string path = dir.file("peer.key");
  Identity a = Identity::generate();
  REQUIRE(a.save(path).is_ok());
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto loaded = Identity::load(path);
  REQUIRE(loaded.is_ok());
  CHECK(loaded->public_key() == a.public_key());
  // The same key signs the same way after loading.
  CHECK(loaded->sign(bytes_of("x")) == a.sign(bytes_of("x")));
  // No silent overwrite.
  Identity b = Identity::generate();
  CHECK(b.save(path).code() == StatusCode::kAlreadyExists);
  REQUIRE(b.save(path, /*overwrite=*/true).is_ok());
  CHECK(Identity::load(path)->public_key() == b.public_key());
}

TEST_CASE("identity: key files readable by others are refused") {
  TempDir dir;
  const std::string path = dir.file("peer.key");
  REQUIRE(Identity::generate().save(path).is_ok());
  for (mode_t mode : {0640, 0604, 0660, 0602}) {
    REQUIRE(::chmod(path.c_str(), mode) == 0);
    auto loaded = Identity::load(path);
    REQUIRE_FALSE(loaded.is_ok());
    CHECK(loaded.status().code() == StatusCode::kPermissionDenied);
    CHECK(loaded.status().message().find("chmod 600") != std::string::npos);
  }
  REQUIRE(::chmod(path.c_str(), 0400) == 0);
  CHECK(Identity::load(path).is_ok());
}

TEST_CASE("identity: a FIFO at a key file's path is refused at once, and a key file another user owns is refused") {
  TempDir dir;
  const std::string fifo = dir.file("fifo.key");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto from_fifo = Identity::load(fifo);  // returns: nobody writes the FIFO, and the open does not wait
  REQUIRE_FALSE(from_fifo.is_ok());
  CHECK(from_fifo.status().message().find("not a regular file") != std::string::npos);
  if (::geteuid() == 0) {
    const std::string path = dir.file("theirs.key");
    REQUIRE(Identity::generate().save(path).is_ok());
    REQUIRE(::chown(path.c_str(), 12345, 12345) == 0);
    auto loaded = Identity::load(path);
    REQUIRE_FALSE(loaded.is_ok());
    CHECK(loaded.status().code() == StatusCode::kPermissionDenied);
    CHECK(loaded.status().message().find("belongs to uid 12345") != std::string::npos);
    REQUIRE(::chown(path.c_str(), 0, 0) == 0);
    CHECK(Identity::load(path).is_ok());  // root's, as a mounted secret is
  }
}

TEST_CASE("identity: malformed key files are rejected with a reason") {
  TempDir dir;
  auto write = [&](const std::string& name, const std::string& content) {
    const std::string path = dir.file(name);
    std::ofstream(path) << content;
    ::chmod(path.c_str(), 0600);
    return path;
  };
  CHECK_FALSE(Identity::load(write("empty", "")).is_ok());
  CHECK_FALSE(Identity::load(write("short", "tensorhub-ed25519-seed abcd\n")).is_ok());
  CHECK_FALSE(Identity::load(write("label", "tensorhub-swarm-key " + std::string(64, 'a') + "\n")).is_ok());
  CHECK_FALSE(Identity::load(write("nothex", "tensorhub-ed25519-seed " + std::string(64, 'g') + "\n")).is_ok());
  CHECK_FALSE(Identity::load(write("big", std::string(10000, '#'))).is_ok());
  CHECK(Identity::load(write("ok", "# c\n\ntensorhub-ed25519-seed " + std::string(64, 'a') + "\r\n")).is_ok());
  CHECK(Identity::load(dir.file("missing")).status().code() == StatusCode::kNotFound);
}
