// safetensors files: read through mmap with zero-copy views, write from views.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON, then the data
// buffer. The JSON maps each tensor name to {"dtype", "shape",
// "data_offsets": [begin, end]} (offsets relative to the data buffer), and may
// hold "__metadata__": {string: string}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorhub/status.hpp"
#include "tensorhub/tensor.hpp"

namespace tensorhub {

inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;  // as upstream

// "__metadata__" entries, in the order the file lists them.
using SafetensorsMetadata = std::vector<std::pair<std::string, std::string>>;

// A parsed header. Tensor entries carry offsets from the start of the FILE
// (not of the data buffer), so that they describe the file as a flat image.
struct SafetensorsLayout {
  std::uint64_t header_bytes = 0;     // N
  std::uint64_t data_offset = 0;      // 8 + N
  std::uint64_t file_size = 0;
  std::vector<TensorEntry> tensors;   // in data order
  SafetensorsMetadata metadata;       // in file order
};

// Parses and validates a safetensors image held in memory: the header size
// limit, legal JSON with no duplicate keys, known dtypes, shapes that match
// the byte lengths, offsets in bounds, no overlaps, and a data buffer covered
// exactly (no holes, no trailing bytes), as upstream safetensors requires.
// Errors: kCorrupt (the first rule the bytes break).
Result<SafetensorsLayout> parse_safetensors(std::span<const std::byte> file);

// A read-only memory map of a safetensors file. Move-only; the views it hands
// out borrow from the mapping and must not outlive it.
class SafetensorsFile {
 public:
  // Maps the file at `path` and parses it as parse_safetensors() does.
  // Errors: kNotFound (no such file), kPermissionDenied (no right to read
  // it), kInvalidArgument (not a regular file), kIoError (it cannot be
  // opened or mapped otherwise), kCorrupt (as parse_safetensors; the message
  // starts with `path`).
  static Result<SafetensorsFile> open(const std::string& path);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const SafetensorsLayout& layout() const { return layout_; }
  // The whole file: the flat image a manifest describes.
  std::span<const std::byte> bytes() const;
  std::vector<TensorView> tensors() const;
  const SafetensorsMetadata& metadata() const { return layout_.metadata; }

 private:
  SafetensorsFile() = default;
  struct Mapping;  // the mmap; owned, unmapped on destruction
  std::unique_ptr<Mapping> mapping_;
  SafetensorsLayout layout_;
};

// Serializes tensors to safetensors bytes: header first (compact JSON,
// "__metadata__" first, tensors in the given order, padded with spaces to a
// multiple of 8 bytes, as upstream writes it), then each tensor's bytes in
// order. A file read with SafetensorsFile and written back from its views is
// byte-identical when it was written this way.
// Errors: kInvalidArgument (a tensor validate_tensor_table refuses, e.g. one
// whose data size does not match its dtype and shape; a tensor named
// "__metadata__"; a repeated metadata key; metadata that is not UTF-8; a
// header over kMaxSafetensorsHeaderBytes).
Result<std::vector<std::byte>> serialize_safetensors(std::span<const TensorView> tensors,
                                                     const SafetensorsMetadata& metadata);
// Just the header (length prefix, JSON, padding) for tensors whose offsets are
// relative to the data buffer and tile it in order from 0.
// Errors: as serialize_safetensors; kInvalidArgument also for a tensor that
// does not start where the one before it ends.
Result<std::vector<std::byte>> encode_safetensors_header(std::span<const TensorEntry> tensors,
                                                          const SafetensorsMetadata& metadata);
// The same as serialize_safetensors, streamed to a file (written to a temporary name, synced, then
// renamed over any file at `path`), mode 0644.
// Errors: as serialize_safetensors; kNotFound (`path`'s directory does not exist), kPermissionDenied
// (no right to create the file there), kIoError (a write, the sync or the rename fails otherwise).
Status write_safetensors_file(const std::string& path, std::span<const TensorView> tensors,
                              const SafetensorsMetadata& metadata);

}  // namespace tensorhub
