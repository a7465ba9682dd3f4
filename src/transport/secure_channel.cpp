#include "transport/secure_channel.hpp"

#include <sodium.h>

#include <cassert>
#include <cstring>

#include "core/sodium_init.hpp"

namespace tensorhub::transport {
namespace {

constexpr std::uint8_t kMagic[3] = {'T', 'H', 'd'};
constexpr std::uint8_t kLaneZero = '1';
constexpr std::string_view kSigDomainInitiator{"tensorhub data initiator v1\0", 28};
constexpr std::string_view kSigDomainResponder{"tensorhub data responder v1\0", 28};

std::array<std::uint8_t, 16> mac(const std::array<std::uint8_t, 32>& key, std::span<const std::uint8_t> data) {
  std::array<std::uint8_t, 16> out{};
  crypto_generichash(out.data(), out.size(), data.data(), data.size(), key.data(), key.size());
  return out;
}

std::array<std::uint8_t, 32> transcript_hash(std::span<const std::uint8_t> transcript) {
  std::array<std::uint8_t, 32> out{};
  crypto_generichash(out.data(), out.size(), transcript.data(), transcript.size(), nullptr, 0);
  return out;
}

std::vector<std::uint8_t> signing_message(std::string_view domain, std::span<const std::uint8_t> transcript) {
  const auto hash = transcript_hash(transcript);
  std::vector<std::uint8_t> m(domain.begin(), domain.end());
  m.insert(m.end(), hash.begin(), hash.end());
  return m;
}

// Session key = BLAKE2b keyed with the swarm data key over kx key || transcript hash.
core::AeadKey mix(const std::array<std::uint8_t, 32>& data_key, const std::uint8_t* kx_key,
                  std::span<const std::uint8_t> transcript) {
  const auto hash = transcript_hash(transcript);
  std::uint8_t input[64];
  std::memcpy(input, kx_key, 32);
  std::memcpy(input + 32, hash.data(), 32);
  core::AeadKey out{};
  crypto_generichash(out.data(), out.size(), input, sizeof input, data_key.data(), data_key.size());
  sodium_memzero(input, sizeof input);
  return out;
}

bool equal_mac(const std::uint8_t* a, const std::uint8_t* b) { return sodium_memcmp(a, b, 16) == 0; }

core::AeadNonce counter_nonce(std::uint64_t counter) {
  core::AeadNonce nonce{};
  for (int i = 0; i < 8; ++i) nonce[static_cast<std::size_t>(23 - i)] = static_cast<std::uint8_t>(counter >> (8 * i));
  return nonce;
}

}  // namespace

HandshakeInitiator::HandshakeInitiator(const Identity& identity, const SwarmKey& swarm_key, std::uint8_t lane)
    : identity_(identity), data_key_(swarm_key.derive("data")), lane_(lane) {
  assert(lane < kMaxLanes);
  core::ensure_sodium();
  crypto_kx_keypair(eph_public_.data(), eph_secret_.data());
}

HandshakeInitiator::~HandshakeInitiator() {
  sodium_memzero(eph_secret_.data(), eph_secret_.size());
  sodium_memzero(data_key_.data(), data_key_.size());
}

std::vector<std::uint8_t> HandshakeInitiator::hello() {
  std::vector<std::uint8_t> m(kHelloBytes);
  std::memcpy(m.data(), kMagic, 3);
  m[3] = static_cast<std::uint8_t>(kLaneZero + lane_);
  std::memcpy(m.data() + 4, eph_public_.data(), 32);
  std::memcpy(m.data() + 36, identity_.public_key().bytes.data(), 32);
  const auto tag = mac(data_key_, std::span(m).first(kHelloBytes - 16));
  std::memcpy(m.data() + kHelloBytes - 16, tag.data(), 16);
  transcript_ = m;
  return m;
}

Result<std::vector<std::uint8_t>> HandshakeInitiator::on_welcome(std::span<const std::uint8_t> welcome) {
  if (welcome.size() != kWelcomeBytes) return Status::verify_failed("handshake: welcome of the wrong size");
  std::vector<std::uint8_t> seen = transcript_;
  seen.insert(seen.end(), welcome.begin(), welcome.end() - 16);
  if (!equal_mac(mac(data_key_, seen).data(), welcome.data() + kWelcomeBytes - 16)) {
    return Status::verify_failed("handshake: the responder does not hold this swarm's key");
  }
  ChannelKeys keys;
  keys.lane = lane_;
  std::memcpy(keys.remote.bytes.data(), welcome.data() + 32, 32);
  Signature sig;
  std::memcpy(sig.bytes.data(), welcome.data() + 64, 64);
  // The responder signed the transcript up to and including its keys.
  std::vector<std::uint8_t> signed_part = transcript_;
  signed_part.insert(signed_part.end(), welcome.begin(), welcome.begin() + 64);
  if (!verify_signature(keys.remote, signing_message(kSigDomainResponder, signed_part), sig)) {
    return Status::verify_failed("handshake: the responder's signature does not match its peer key");
  }
  transcript_.insert(transcript_.end(), welcome.begin(), welcome.end());
  std::uint8_t rx[32], tx[32];
  if (crypto_kx_client_session_keys(rx, tx, eph_public_.data(), eph_secret_.data(), welcome.data()) != 0) {
    return Status::verify_failed("handshake: bad ephemeral key");
  }
  keys.receive = mix(data_key_, rx, transcript_);
  keys.send = mix(data_key_, tx, transcript_);
  sodium_memzero(rx, sizeof rx);
  sodium_memzero(tx, sizeof tx);
  const Signature mine = identity_.sign(signing_message(kSigDomainInitiator, transcript_));
  keys_ = keys;
  return std::vector<std::uint8_t>(mine.bytes.begin(), mine.bytes.end());
}

HandshakeResponder::HandshakeResponder(const Identity& identity, const SwarmKey& swarm_key)
    : identity_(identity), data_key_(swarm_key.derive("data")) {
  core::ensure_sodium();
  crypto_kx_keypair(eph_public_.data(), eph_secret_.data());
}

HandshakeResponder::~HandshakeResponder() {
  sodium_memzero(eph_secret_.data(), eph_secret_.size());
  sodium_memzero(data_key_.data(), data_key_.size());
}

Result<std::vector<std::uint8_t>> HandshakeResponder::on_hello(std::span<const std::uint8_t> hello) {
  if (hello.size() != kHelloBytes || std::memcmp(hello.data(), kMagic, 3) != 0 || hello[3] < kLaneZero ||
      hello[3] >= kLaneZero + kMaxLanes) {
    return Status::verify_failed("handshake: not a TensorHub data connection");
  }
  if (!equal_mac(mac(data_key_, hello.first(kHelloBytes - 16)).data(), hello.data() + kHelloBytes - 16)) {
    return Status::verify_failed("handshake: the initiator does not hold this swarm's key");
  }
  std::memcpy(initiator_.bytes.data(), hello.data() + 36, 32);
  transcript_.assign(hello.begin(), hello.end());
  std::vector<std::uint8_t> m(eph_public_.begin(), eph_public_.end());
  m.insert(m.end(), identity_.public_key().bytes.begin(), identity_.public_key().bytes.end());
  std::vector<std::uint8_t> signed_part = transcript_;
  signed_part.insert(signed_part.end(), m.begin(), m.end());
  const Signature sig = identity_.sign(signing_message(kSigDomainResponder, signed_part));
  m.insert(m.end(), sig.bytes.begin(), sig.bytes.end());
  std::vector<std::uint8_t> seen = transcript_;
  seen.insert(seen.end(), m.begin(), m.end());
  const auto tag = mac(data_key_, seen);
  m.insert(m.end(), tag.begin(), tag.end());
  transcript_.insert(transcript_.end(), m.begin(), m.end());

  std::uint8_t rx[32], tx[32];
  if (crypto_kx_server_session_keys(rx, tx, eph_public_.data(), eph_secret_.data(), hello.data() + 4) != 0) {
    return Status::verify_failed("handshake: bad ephemeral key");
  }
  ChannelKeys keys;
  keys.remote = initiator_;
  keys.lane = static_cast<std::uint8_t>(hello[3] - kLaneZero);
  keys.receive = mix(data_key_, rx, transcript_);
  keys.send = mix(data_key_, tx, transcript_);
  sodium_memzero(rx, sizeof rx);
  sodium_memzero(tx, sizeof tx);
  pending_ = keys;
  return m;
}

Status HandshakeResponder::on_finish(std::span<const std::uint8_t> finish) {
  if (!pending_ || finish.size() != kFinishBytes) return Status::verify_failed("handshake: finish of the wrong size");
  Signature sig;
  std::memcpy(sig.bytes.data(), finish.data(), 64);
  if (!verify_signature(initiator_, signing_message(kSigDomainInitiator, transcript_), sig)) {
    return Status::verify_failed("handshake: the initiator's signature does not match its peer key");
  }
  keys_ = pending_;
  return Status::ok();
}

std::vector<std::uint8_t> FrameSealer::seal(std::span<const std::uint8_t> plaintext) {
  std::vector<std::uint8_t> out;
  out.reserve(plaintext.size() + kFrameOverhead);
  seal(plaintext, out);
  return out;
}

void FrameSealer::seal(std::span<const std::uint8_t> plaintext, std::vector<std::uint8_t>& out) {
  core::aead_seal(key_, counter_nonce(counter_++), {}, plaintext, out);
}

bool FrameOpener::open(std::span<const std::uint8_t> sealed, std::vector<std::uint8_t>& plaintext) {
  if (!core::aead_open(key_, counter_nonce(counter_), {}, sealed, plaintext)) return false;
  ++counter_;
  return true;
}

}  // namespace tensorhub::transport
