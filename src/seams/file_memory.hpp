// Host memory that is a shared mapping of a file (a fetch into an output
// file): read, hashed and served like any host memory, but written through
// the file with pwrite(2), never through the mapping.
//
// Why: a store through a shared mapping faults each new page in, and the
// kernel zero-fills the page before the store overwrites it; pwrite of
// whole pages fills them without zeroing first. Writing 1 GiB into a new
// /dev/shm file in 128 KiB pieces takes 0.57-0.69 s through the mapping
// and 0.31-0.34 s with pwrite (docs/benchmarks.md). So received payloads do
// not land in place (receives_in_place() is false): the transport receives
// each into a host buffer that stays in cache, and write() puts it in the
// file. Reads through the mapping then find the pages in the page cache.
// The engine calls write() on its I/O thread, as it receives the payload
// there: one more copy of the block, cache to page cache, in place of the
// zeroing it saves.
#pragma once

#include <cstddef>
#include <mutex>
#include <optional>
#include <span>
#include <utility>

#include "core/mapped_output_file.hpp"
#include "seams/destination_owner.hpp"
#include "seams/memory_domain.hpp"

namespace tensorhub::peer {

class FileMemory final : public MemoryDomain {
 public:
  // REQUIRES: `mapping` maps `fd`'s file from offset 0 (MAP_SHARED), and
  // both stay valid while this object lives.
  FileMemory(int fd, std::span<std::byte> mapping) : fd_(fd), mapping_(mapping) {}

  std::string_view name() const override { return "file"; }
  bool verify_shard(const Manifest& manifest, ShardIndex index, const core::ConstRegions& image) const override;
  bool digest(ShardHashAlgorithm algorithm, const core::ConstRegions& image, std::uint64_t offset,
              std::uint64_t length, ShardDigest& out) const override;
  // Into the file, by pwrite from `from`'s pieces, where `to` lies in the
  // mapping; elsewhere as host memory.
  // Errors: as write(); kUnavailable when a piece of `from` could not be
  // read (pwrite fails with EFAULT rather than faulting).
  Status copy(const core::ConstRegions& from, const core::MutableRegions& to, std::uint64_t offset,
              std::uint64_t length) const override;
  core::Blake2bDigest digest_ranges(std::span<const std::uint8_t> prefix, std::span<const ByteRange> ranges,
                                    const core::ConstRegions& image) const override;
  bool read(const core::ConstRegions& image, std::uint64_t offset, std::span<std::byte> out) const override;
  // Into the file, by pwrite, where `image` lies in the mapping (a region
  // of it, or all of it); elsewhere as host memory. Errors:
  // kIoError naming the errno (ENOSPC, EIO, EROFS, EFBIG...), or saying the
  // file was removed (its last name gone: nobody would ever see the bytes).
  Status write(const core::MutableRegions& image, std::uint64_t offset,
               std::span<const std::byte> bytes) const override;
  bool receives_in_place() const override { return false; }

 private:
  // Whether `image` is this object's mapping (writes to it go to the file).
  bool is_mapping(const core::MutableRegions& image) const;
  // Where `piece` lies in the file, when it lies in the mapping.
  std::optional<std::uint64_t> file_offset(std::span<const std::byte> piece) const;
  // Writes `bytes` at `offset` of the file, retrying short writes; returns
  // errno on failure (0: written).
  int write_file(std::uint64_t offset, std::span<const std::byte> bytes) const;
  Status write_error(int error, std::uint64_t offset) const;

  int fd_;
  std::span<std::byte> mapping_;
};

// An output file and the memory domain that writes it: what a fetch into a
// file keeps for as long as its version lives (LocalVersion::backing).
// Thread-safe: the application commits and releases it, the driver tells
// it of a failure.
class FileDestination final : public DestinationOwner {
 public:
  explicit FileDestination(core::MappedOutputFile output)
      : file_(std::move(output)), domain_(file_.fd(), file_.bytes()) {}

  const FileMemory& domain() const { return domain_; }
  std::span<std::byte> bytes() { return file_.bytes(); }
  const std::string& temporary_path() const { return file_.temporary_path(); }

  // Renames the file into place (ok again once there). Errors: as
  // MappedOutputFile::commit; kCancelled once released or failed first.
  Status commit();
  // The handle let go: a file not yet in place loses its name, and its
  // mapping stays, so retention may go on serving the version from it.
  void release();
  // The fetch failed: the temporary file goes, with its blocks.
  void fetch_failed() override;

 private:
  std::mutex mutex_;
  core::MappedOutputFile file_;
  FileMemory domain_;  // after `file_`: it writes through file_'s descriptor
  bool released_ = false, failed_ = false;
};

}  // namespace tensorhub::peer
