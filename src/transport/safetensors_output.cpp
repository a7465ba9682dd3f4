#include "transport/safetensors_output.hpp"

#include <vector>

#include "manifest/slices_metadata.hpp"
#include "tensorhub/safetensors.hpp"

namespace tensorhub::peer {

Result<SafetensorsOutput> create_safetensors_output(const std::string& path, std::span<const TensorEntry> tensors,
                                                    const FileOptions& options) {
  SafetensorsMetadata metadata;
  if (std::string slices = manifest::slices_metadata(tensors); !slices.empty()) {
    metadata.emplace_back(manifest::kSlicesMetadataKey, std::move(slices));
  }
  // The header names each tensor at the shape it has in the file.
  std::vector<TensorEntry> in_file(tensors.begin(), tensors.end());
  std::uint64_t data_size = 0;
  for (TensorEntry& t : in_file) {
    t.global_shape.clear();
    t.slice_begin.clear();
    data_size += t.byte_length;
  }
  auto header = encode_safetensors_header(in_file, metadata);
  if (!header) return header.status();
  auto created = core::MappedOutputFile::create(path, header->size() + data_size, options.mode, options.overwrite);
  if (!created) return created.status();
  auto file = std::make_shared<FileDestination>(std::move(*created));
  const Status written = file->domain().write(core::MutableRegions(file->bytes()), 0, *header);
  if (!written.is_ok()) {
    file->fetch_failed();
    return written.with_context("the header of " + path);
  }
  return SafetensorsOutput{file, file->bytes().subspan(header->size())};
}

}  // namespace tensorhub::peer
