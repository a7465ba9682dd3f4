#include "transport/secure_channel.hpp"

#include <sodium.h>

#include <cassert>
#include <cstring>

#include "core/key_derivation.hpp"
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

// mac_i: over the responder's id, then the hello up to its MAC.
HelloMac hello_mac(const std::array<std::uint8_t, 32>& data_key, const PeerId& responder,
                   std::span<const std::uint8_t> hello) {
  std::vector<std::uint8_t> input(responder.bytes.begin(), responder.bytes.end());
  input.insert(input.end(), hello.begin(), hello.begin() + (kHelloBytes - 16));
  return mac(data_key, input);
}

constexpr std::size_t kHelloTimeAt = 4 + 32 + 32;

core::AeadNonce counter_nonce(std::uint64_t counter) {
  core::AeadNonce nonce{};
  for (int i = 0; i < 8; ++i) nonce[static_cast<std::size_t>(23 - i)] = static_cast<std::uint8_t>(counter >> (8 * i));
  return nonce;
}

}  // namespace

bool HelloReplayCache::admit(const HelloMac& mac, std::uint64_t now_unix_micros) {
  while (!order_.empty() && (order_.size() >= capacity_ ||
                             order_.front().first + 2 * kHelloFreshnessMicros < now_unix_micros)) {
    seen_.erase(order_.front().second);
    order_.pop_front();
  }
  if (!seen_.insert(mac).second) return false;
  order_.emplace_back(now_unix_micros, mac);
  return true;
}

HandshakeInitiator::HandshakeInitiator(const Identity& identity, const SwarmKey& swarm_key, const PeerId& responder,
                                       std::uint8_t lane)
    : identity_(identity), data_key_(core::derive_subkey(swarm_key, "data")), responder_(responder), lane_(lane) {
  assert(lane < kMaxLanes);
  core::ensure_sodium();
  crypto_kx_keypair(eph_public_.data(), eph_secret_.data());
}

HandshakeInitiator::~HandshakeInitiator() {
  sodium_memzero(eph_secret_.data(), eph_secret_.size());
  sodium_memzero(data_key_.data(), data_key_.size());
}

std::vector<std::uint8_t> HandshakeInitiator::hello(std::uint64_t now_unix_micros) {
  std::vector<std::uint8_t> m(kHelloBytes);
  std::memcpy(m.data(), kMagic, 3);
  m[3] = static_cast<std::uint8_t>(kLaneZero + lane_);
  std::memcpy(m.data() + 4, eph_public_.data(), 32);
  std::memcpy(m.data() + 36, identity_.public_key().bytes.data(), 32);
  for (int i = 0; i < 8; ++i) m[kHelloTimeAt + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(now_unix_micros >> (56 - 8 * i));
  const auto tag = hello_mac(data_key_, responder_, m);
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
  if (keys.remote != responder_) {
    return Status::verify_failed("handshake: the peer at that address is " + keys.remote.short_hex() + ", not " +
                                 responder_.short_hex());
  }
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

HandshakeResponder::HandshakeResponder(const Identity& identity, const SwarmKey& swarm_key, HelloReplayCache& replays)
    : identity_(identity), data_key_(core::derive_subkey(swarm_key, "data")), replays_(replays) {
  core::ensure_sodium();
  crypto_kx_keypair(eph_public_.data(), eph_secret_.data());
}

HandshakeResponder::~HandshakeResponder() {
  sodium_memzero(eph_secret_.data(), eph_secret_.size());
  sodium_memzero(data_key_.data(), data_key_.size());
}

Result<std::vector<std::uint8_t>> HandshakeResponder::on_hello(std::span<const std::uint8_t> hello,
                                                               std::uint64_t now_unix_micros) {
  if (hello.size() != kHelloBytes || std::memcmp(hello.data(), kMagic, 3) != 0 || hello[3] < kLaneZero ||
      hello[3] >= kLaneZero + kMaxLanes) {
    return Status::verify_failed("handshake: not a TensorHub data connection");
  }
  const HelloMac hello_tag = hello_mac(data_key_, identity_.public_key(), hello);
  if (!equal_mac(hello_tag.data(), hello.data() + kHelloBytes - 16)) {
    return Status::verify_failed("handshake: the initiator does not hold this swarm's key, or meant another peer");
  }
  std::uint64_t sent = 0;
  for (int i = 0; i < 8; ++i) sent = sent << 8 | hello[kHelloTimeAt + static_cast<std::size_t>(i)];
  const std::uint64_t skew = sent > now_unix_micros ? sent - now_unix_micros : now_unix_micros - sent;
  if (skew > kHelloFreshnessMicros) {
    return Status::verify_failed("handshake: a hello " + std::to_string(skew / 1'000'000) +
                                 " s from this clock (a replay, or clocks more than 30 s apart)");
  }
  if (!replays_.admit(hello_tag, now_unix_micros)) return Status::verify_failed("handshake: a replayed hello");
  std::memcpy(initiator_.bytes.data(), hello.data() + 36, 32);
  if (initiator_ == identity_.public_key()) {
    // Another process with this key (a copied key file), or a reflection.
    return Status::verify_failed("handshake: the initiator claims this peer's own identity");
  }
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
