#include "core/aead.hpp"

#include <sodium.h>

#include "core/sodium_init.hpp"

namespace tensorhub::core {

void aead_seal(const AeadKey& key, const AeadNonce& nonce, std::span<const std::uint8_t> associated,
               std::span<const std::uint8_t> plaintext, std::vector<std::uint8_t>& out) {
  ensure_sodium();
  const std::size_t start = out.size();
  out.resize(start + plaintext.size() + kAeadTagBytes);
  unsigned long long written = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(out.data() + start, &written, plaintext.data(), plaintext.size(),
                                             associated.data(), associated.size(), nullptr, nonce.data(), key.data());
  out.resize(start + written);
}

bool aead_open(const AeadKey& key, const AeadNonce& nonce, std::span<const std::uint8_t> associated,
               std::span<const std::uint8_t> sealed, std::vector<std::uint8_t>& plaintext) {
  ensure_sodium();
  if (sealed.size() < kAeadTagBytes) return false;
  plaintext.resize(sealed.size() - kAeadTagBytes);
  unsigned long long written = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(plaintext.data(), &written, nullptr, sealed.data(), sealed.size(),
                                                 associated.data(), associated.size(), nonce.data(),
                                                 key.data()) != 0) {
    plaintext.clear();
    return false;
  }
  plaintext.resize(written);
  return true;
}

}  // namespace tensorhub::core
