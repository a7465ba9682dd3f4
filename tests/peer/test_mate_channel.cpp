// The local channel's messages (src/transport/mate_channel.hpp): what a peer
// accepts from a process that claims to be a host mate.
#include <doctest/doctest.h>

#include <unistd.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "transport/mate_channel.hpp"
#include "transport/mate_server.hpp"

using namespace tensorhub;
using namespace tensorhub::peer;

namespace {

std::vector<SharedRange> two_ranges() {
  SharedRange a, b;
  for (std::size_t i = 0; i < a.handle.size(); ++i) {
    a.handle[i] = static_cast<std::uint8_t>(i);
    b.handle[i] = static_cast<std::uint8_t>(255 - i);
  }
  a.offset = 12345;
  a.length = 1000;
  b.offset = 0;
  b.length = 24;
  return {a, b};
}

}  // namespace

TEST_CASE("mate channel: an answer round-trips and must add up to the version's size") {
  const auto ranges = two_ranges();
  const std::string text = encode_mate_answer(ranges);
  std::vector<SharedRange> out;
  REQUIRE(decode_mate_answer(text, 1024, out).is_ok());
  REQUIRE(out.size() == 2);
  CHECK(out[0].handle == ranges[0].handle);
  CHECK(out[1].handle == ranges[1].handle);
  CHECK(out[0].offset == 12345);
  CHECK(out[1].length == 24);
  CHECK(decode_mate_answer(text, 1023, out).code() == StatusCode::kCorrupt);
  CHECK(decode_mate_answer(text, 1025, out).code() == StatusCode::kCorrupt);
  const Status refused = decode_mate_answer(encode_mate_refusal("not held\nhere"), 1024, out);
  CHECK(refused.code() == StatusCode::kUnavailable);
  CHECK(refused.message().find("not held here") != std::string::npos);
}

TEST_CASE("mate channel: malformed answers and requests are refused with a reason") {
  std::vector<SharedRange> out;
  const std::string handle(128, 'a');
  for (const std::string& bad : {std::string(""), std::string("ok\n"), std::string("ok 0\n"), std::string("ok 70000\n"),
                                std::string("ok 1\n") + handle + " 0 1024",  // no newline
                                std::string("ok 1\n") + handle + " 0 1024\nextra",
                                std::string("ok 1\n") + std::string(127, 'a') + " 0 1024\n",
                                std::string("ok 1\n") + std::string(128, 'g') + " 0 1024\n",
                                std::string("ok 1\n") + std::string(128, 'A') + " 0 1024\n",
                                std::string("ok 1\n") + handle + " -1 1024\n",
                                std::string("ok 1\n") + handle + " 18446744073709551615 1024\n",
                                std::string("ok 1\n") + handle + " 0 0\n",
                                std::string("ok 2\n") + handle + " 0 1024\n",
                                std::string("hello\n")}) {
    const Status s = decode_mate_answer(bad, 1024, out);
    CHECK_MESSAGE(s.code() == StatusCode::kCorrupt, bad);
  }
  const ManifestId id = ManifestId::from_hex(std::string(64, 'b')).value();
  auto ok = decode_mate_request(encode_mate_request(id));
  REQUIRE(ok.is_ok());
  CHECK(*ok == id);
  for (const std::string& bad : {std::string(64, 'b'), std::string(64, 'B') + "\n", std::string(63, 'b') + "\n",
                                std::string(65, 'b') + "\n", std::string(64, 'z') + "\n"}) {
    CHECK(decode_mate_request(bad).status().code() == StatusCode::kCorrupt);
  }
}

TEST_CASE("mate channel: mutated answers never crash the decoder, and what it accepts adds up") {
  const std::string valid = encode_mate_answer(two_ranges());
  std::mt19937_64 rng(7);
  int accepted = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string text = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[at] = static_cast<char>(rng()); break;
        case 1: text.erase(at, 1); break;
        default: text.insert(at, 1, "0123456789 \nabcdef"[rng() % 18]); break;
      }
      if (text.empty()) break;
    }
    std::vector<SharedRange> out;
    if (decode_mate_answer(text, 1024, out).is_ok()) {
      ++accepted;
      std::uint64_t sum = 0;
      for (const SharedRange& r : out) {
        CHECK(r.length > 0);
        sum += r.length;
      }
      CHECK(sum == 1024);
    }
  }
  MESSAGE("mutated answers accepted (still well-formed): " << accepted << " of 20000");
}

TEST_CASE("mate server: lends what the engine lends, refuses with its reason, and the loan ends when the mate closes") {
  asio::io_context io;
  PeerId holder;
  holder.bytes[0] = 0x47;
  holder.bytes[31] = static_cast<std::uint8_t>(::getpid());
  ManifestId lent_id, refused_id;
  lent_id.bytes[0] = 1;
  refused_id.bytes[0] = 2;
  std::atomic<int> loans = 0, given_back = 0;  // counted on the server's thread
  MateServer server(io, [&](const ManifestId& id) -> Result<MateServer::Loan> {
    if (id != lent_id) return Status::not_found("this peer does not hold that version");
    ++loans;
    return MateServer::Loan{two_ranges(), [&] { ++given_back; }};
  });
  const std::string data_addr = "127.0.0.1:" + std::to_string(40000 + ::getpid() % 20000);
  REQUIRE(server.listen(mate_socket_name(holder, data_addr)).is_ok());
  CHECK(server.listening());
  auto guard = asio::make_work_guard(io);
  std::thread loop([&] { io.run(); });

  std::vector<SharedRange> ranges;
  int connection = -1;
  REQUIRE(ask_mate(holder, data_addr, lent_id, 1024, 5000, ranges, connection).is_ok());
  REQUIRE(ranges.size() == 2);
  CHECK(ranges[0].offset == 12345);
  int refused_connection = -1;
  const Status refused = ask_mate(holder, data_addr, refused_id, 1024, 5000, ranges, refused_connection);
  CHECK(refused.code() == StatusCode::kUnavailable);
  CHECK(refused.message().find("does not hold that version") != std::string::npos);
  for (int i = 0; i < 200 && given_back == 0; ++i) {
    if (i == 0) ::close(connection);  // the copy is done: the loan ends
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  server.close();
  guard.reset();
  io.stop();
  loop.join();
  CHECK(loans == 1);
  CHECK(given_back == 1);
  CHECK(server.versions_lent() == 1);
}
