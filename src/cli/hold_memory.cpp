#include "cli/hold_memory.hpp"

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "core/log.hpp"
#include "cuda/cuda_sharing.hpp"
#include "cuda/device_api.hpp"
#include "cuda/gpu_memory.hpp"
#include "tensorhub/dtype.hpp"

namespace tensorhub::cli {
namespace {

namespace fs = std::filesystem;

class FileHoldMemory final : public HoldMemory {
 public:
  FileHoldMemory(std::string path, std::string root) : path_(std::move(path)), root_(std::move(root)) {}

  // After the handle (HeldVersions::Held): an uncommitted file went with it.
  ~FileHoldMemory() override {
    const fs::path path = path_;
    std::error_code ec;
    fs::remove(path, ec);
    // The folders it leaves empty, up to the root.
    for (fs::path dir = path.parent_path(); !dir.empty() && dir != fs::path(root_); dir = dir.parent_path()) {
      if (!fs::remove(dir, ec)) break;
    }
    if (ec && ec.value() != ENOTEMPTY && ec.value() != ENOENT) {
      TH_LOG_WARN("peer", "cannot remove " << path.parent_path().string() << ": " << ec.message());
    }
  }

  Result<FetchHandle> fetch(Peer& peer, const VersionInfo& info) override {
    return peer.fetch_to_file(info.model, info.version, path_);
  }
  Status commit() override { return Status::ok(); }  // the handle's wait() put the file in place
  Status describe(const FetchHandle&, Json& done) const override {
    done["path"] = path_;
    done["dir"] = fs::path(path_).parent_path().string();
    return Status::ok();
  }

 private:
  std::string path_;
  std::string root_;
};

class CudaHoldMemory final : public HoldMemory {
 public:
  CudaHoldMemory(std::string gpu, std::unique_ptr<cuda::DeviceApi> device, std::byte* memory, std::size_t bytes)
      : gpu_(std::move(gpu)), device_(std::move(device)), memory_(memory), bytes_(bytes) {}
  ~CudaHoldMemory() override { device_->free_device(memory_); }

  Result<FetchHandle> fetch(Peer& peer, const VersionInfo& info) override {
    const MutableRegion regions[] = {{memory_, bytes_}};
    return peer.fetch(info.model, info.version, regions, MemoryOptions{gpu_});
  }
  Status commit() override { return Status::ok(); }
  Status describe(const FetchHandle& handle, Json& done) const override {
    cuda::IpcRange range;
    TENSORHUB_RETURN_IF_ERROR(cuda::export_ipc_range(memory_, bytes_, range));
    done["gpu"] = gpu_;
    done["ipc"] = Json{{"handle", to_hex(range.handle)}, {"offset", range.offset}, {"bytes", range.length}};
    done["tensors"] = tensor_table(handle.manifest());
    return Status::ok();
  }

 private:
  std::string gpu_;
  std::unique_ptr<cuda::DeviceApi> device_;
  std::byte* memory_;
  std::size_t bytes_;
};

}  // namespace

Result<std::unique_ptr<HoldMemory>> file_hold_memory(const std::string& path, const std::string& root) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return Status::io_error("cannot create " + fs::path(path).parent_path().string() + ": " + ec.message());
  return std::unique_ptr<HoldMemory>(new FileHoldMemory(path, root));
}

Result<std::unique_ptr<HoldMemory>> cuda_hold_memory(const std::string& gpu, const VersionInfo& info) {
  if (!cuda::is_gpu_uuid(gpu)) return Status::invalid_argument(gpu + " is not a GPU UUID (GPU-xxxxxxxx-...)");
  std::unique_ptr<cuda::DeviceApi> device;
  TENSORHUB_RETURN_IF_ERROR(cuda::open_cuda_device(gpu, 1, device));
  std::byte* memory = nullptr;
  const std::size_t bytes = info.bytes == 0 ? 1 : info.bytes;
  if (Status s = device->allocate_device(bytes, memory); !s) {
    return s.with_context(std::to_string(bytes) + " bytes on " + gpu + " for " + info.model + " v" +
                          std::to_string(info.version));
  }
  return std::unique_ptr<HoldMemory>(new CudaHoldMemory(gpu, std::move(device), memory, info.bytes));
}

Json tensor_table(const Manifest& manifest) {
  Json table = Json::array();
  for (const TensorEntry& t : manifest.tensors()) {
    table.push_back(Json::array({t.name, std::string(dtype_name(t.dtype)), t.shape, t.byte_offset, t.byte_length}));
  }
  return table;
}

}  // namespace tensorhub::cli
