// Reading a length-prefixed frame whose length the sender claims: the
// buffer grows by what arrives, never by what is claimed. A member (or, for
// gossip streams, anyone before the frame is authenticated) that sends a
// 256 MiB length and then nothing costs the reader one chunk, not 256 MiB.
// (memberlist reads streams the same way, through io.CopyN into a growing
// buffer.)
#pragma once

#include <asio.hpp>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <system_error>
#include <utility>
#include <vector>

namespace tensorhub::transport {

inline constexpr std::size_t kReadChunkBytes = 64 * 1024;

// Reads `length` bytes into `buffer` (cleared first), `kReadChunkBytes` at
// a time, then calls done(error). REQUIRES: `socket` and `buffer` outlive
// the read: `done` holds whatever owns them.
template <typename Socket, typename Done>
void async_read_growing(Socket& socket, std::vector<std::uint8_t>& buffer, std::size_t length, Done&& done);

namespace detail {
template <typename Socket, typename Done>
void read_next_chunk(Socket& socket, std::vector<std::uint8_t>& buffer, std::size_t length, Done done) {
  const std::size_t have = buffer.size();
  const std::size_t chunk = std::min(kReadChunkBytes, length - have);
  buffer.resize(have + chunk);
  asio::async_read(socket, asio::buffer(buffer.data() + have, chunk),
                   [&socket, &buffer, length, done = std::move(done)](std::error_code ec, std::size_t) mutable {
                     if (ec || buffer.size() >= length) return done(ec);
                     read_next_chunk(socket, buffer, length, std::move(done));
                   });
}
}  // namespace detail

template <typename Socket, typename Done>
void async_read_growing(Socket& socket, std::vector<std::uint8_t>& buffer, std::size_t length, Done&& done) {
  buffer.clear();
  if (length == 0) {
    asio::post(socket.get_executor(), [done = std::forward<Done>(done)]() mutable { done(std::error_code()); });
    return;
  }
  detail::read_next_chunk(socket, buffer, length, std::forward<Done>(done));
}

}  // namespace tensorhub::transport
