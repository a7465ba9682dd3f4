// The output file of a fetch that has no image of its own to write: a
// version in parts fetched whole, or a selection. The file is a safetensors
// file of the fetch's tensors at their shapes, end to end in the fetch's
// layout, so the fetch lands its bytes in the file's data as it would in
// memory; a slice's global shape and start go in the header's
// "tensorhub.slices" metadata (manifest/slices_metadata.hpp).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "seams/file_memory.hpp"
#include "tensorhub/peer.hpp"
#include "tensorhub/status.hpp"
#include "tensorhub/tensor.hpp"

namespace tensorhub::peer {

struct SafetensorsOutput {
  std::shared_ptr<FileDestination> file;  // its header written
  std::span<std::byte> data;              // the rest of the file: the tensors' bytes, for the fetch
};

// Creates the output file at `path` (as Peer::fetch_to_file: beside it,
// put in place by the fetch handle's wait()) for `tensors`, laid end to end
// from offset 0, and writes its header. Errors: kInvalidArgument (tensors
// a safetensors header cannot hold); as MappedOutputFile::create; kIoError
// (the header could not be written).
Result<SafetensorsOutput> create_safetensors_output(const std::string& path, std::span<const TensorEntry> tensors,
                                                    const FileOptions& options);

}  // namespace tensorhub::peer
