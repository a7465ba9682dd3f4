#include "tensorhub/identity.hpp"

#include <sodium.h>

#include <utility>

#include "core/secret_file.hpp"
#include "core/sodium_init.hpp"

namespace tensorhub {
namespace {
constexpr std::string_view kKeyLabel = "tensorhub-ed25519-seed";
}

Identity Identity::generate() {
  core::ensure_sodium();
  std::array<std::uint8_t, 32> seed;
  randombytes_buf(seed.data(), seed.size());
  Identity id = from_seed(seed);
  sodium_memzero(seed.data(), seed.size());
  return id;
}

Identity Identity::from_seed(std::span<const std::uint8_t, 32> seed) {
  core::ensure_sodium();
  Identity id;
  std::copy(seed.begin(), seed.end(), id.seed_.begin());
  crypto_sign_seed_keypair(id.public_key_.bytes.data(), id.secret_key_.data(), id.seed_.data());
  return id;
}

Result<Identity> Identity::load(const std::string& path) {
  auto seed = core::read_secret_file(path, kKeyLabel);
  if (!seed) return seed.status();
  Identity id = from_seed(*seed);
  sodium_memzero(seed->data(), seed->size());
  return id;
}

Identity::Identity(Identity&& other) noexcept
    : seed_(other.seed_), secret_key_(other.secret_key_), public_key_(other.public_key_) {
  sodium_memzero(other.seed_.data(), other.seed_.size());
  sodium_memzero(other.secret_key_.data(), other.secret_key_.size());
}

Identity& Identity::operator=(Identity&& other) noexcept {
  if (this != &other) {
    seed_ = other.seed_;
    secret_key_ = other.secret_key_;
    public_key_ = other.public_key_;
    sodium_memzero(other.seed_.data(), other.seed_.size());
    sodium_memzero(other.secret_key_.data(), other.secret_key_.size());
  }
  return *this;
}

Identity::~Identity() {
  sodium_memzero(seed_.data(), seed_.size());
  sodium_memzero(secret_key_.data(), secret_key_.size());
}

Status Identity::save(const std::string& path, bool overwrite) const {
  return core::write_secret_file(path, kKeyLabel, "TensorHub peer identity (Ed25519), peer id " + public_key_.hex(),
                                 seed_, overwrite);
}

Signature Identity::sign(std::span<const std::uint8_t> message) const {
  Signature signature;
  crypto_sign_detached(signature.bytes.data(), nullptr, message.data(), message.size(), secret_key_.data());
  return signature;
}

bool verify_signature(const PublicKey& key, std::span<const std::uint8_t> message, const Signature& signature) {
  core::ensure_sodium();
  return crypto_sign_verify_detached(signature.bytes.data(), message.data(), message.size(), key.bytes.data()) == 0;
}

}  // namespace tensorhub
