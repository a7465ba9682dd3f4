// The public Peer: an I/O thread running a PeerEngine, a callback thread for
// the application's callbacks, and thread-safe calls that run on the I/O
// thread and wait for their answer. Its handles are version_handles.cpp's.
#include "tensorhub/peer.hpp"

#include "transport/peer_impl.hpp"
#include "transport/safetensors_output.hpp"

namespace tensorhub {
namespace {

// Publications that lost the race for a version number are built again this often.
constexpr int kPublishAttempts = 3;

}  // namespace

using Impl = PeerAccess::Impl;

namespace peer {

Result<std::unique_ptr<Peer>> start_peer(PeerOptions options, InternalOptions internal, Identity identity,
                                         SwarmKey swarm_key) {
  auto impl = std::make_unique<Impl>();
  Impl* raw = impl.get();
  impl->gate->impl = raw;
  impl->id = identity.public_key();
  impl->identity.emplace(identity.clone());
  impl->shard_size = options.shard_size;
  impl->shard_hash = options.shard_hash;
  impl->publish_head_wait = options.publish_head_wait;
  impl->block_size = options.block_size;
  impl->engine = std::make_unique<PeerEngine>(impl->io, std::move(options), internal, std::move(identity),
                                              std::move(swarm_key),
                                              [raw](std::function<void()> fn) { raw->run_callback(std::move(fn)); });
  Status started = impl->engine->start();
  if (!started.is_ok()) return started;
  impl->engine->on_change([raw] {
    {
      std::lock_guard lock(raw->change_mutex);
      ++raw->generation;
    }
    raw->change.notify_all();
  });
  impl->work.emplace(asio::make_work_guard(impl->io));
  impl->thread = std::thread([raw] { raw->io.run(); });
  return PeerAccess::make(std::move(impl));
}

void post_to_io_thread(Peer& peer, std::function<void()> fn) { asio::post(PeerAccess::impl(peer).io, std::move(fn)); }

}  // namespace peer

Result<std::unique_ptr<Peer>> Peer::start(PeerOptions options, Identity identity, SwarmKey swarm_key) {
  return peer::start_peer(std::move(options), peer::InternalOptions{}, std::move(identity), std::move(swarm_key));
}

Peer::Peer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Peer::~Peer() = default;

const PeerId& Peer::id() const { return impl_->id; }

std::string Peer::gossip_address() const {
  return impl_->call([&] { return impl_->engine->gossip_address().to_string(); });
}

Result<PublishHandle> Peer::publish(const std::string& model, std::span<const std::byte> image,
                                    std::vector<TensorEntry> tensors) {
  if (image.empty()) return publish(model, std::span<const ConstRegion>(), std::move(tensors));
  const ConstRegion one[] = {image};
  return publish(model, std::span<const ConstRegion>(one), std::move(tensors));
}

Result<PublishHandle> Peer::publish(const std::string& model, std::span<const ConstRegion> regions,
                                    std::vector<TensorEntry> tensors) {
  return peer::publish_from(*this, model, regions, std::move(tensors), peer::host_memory());
}

Result<PublishHandle> Peer::publish(const std::string& model, std::span<const ConstRegion> regions,
                                    std::vector<TensorEntry> tensors, const MemoryOptions& options) {
  if (options.gpu.empty()) return publish(model, regions, std::move(tensors));
  auto gpu = PeerAccess::gpu(*impl_, options.gpu);
  if (!gpu) return gpu.status();
  return peer::publish_from(*this, model, regions, std::move(tensors), (*gpu)->domain());
}

Result<PublishHandle> peer::publish_from(Peer& peer, const std::string& model, std::span<const ConstRegion> regions,
                                         std::vector<TensorEntry> tensors, const MemoryDomain& domain) {
  Impl* impl = &PeerAccess::impl(peer);
  const auto head_deadline = std::chrono::steady_clock::now() + impl->publish_head_wait;
  for (int attempt = 1;;) {
    const std::uint64_t seen = impl->current_generation();
    auto next = impl->call([&] { return impl->engine->next_version(model); });
    if (!next && next.status().code() == StatusCode::kUnavailable && impl->wait_change(seen, head_deadline)) continue;
    if (!next) return next.status();
    ManifestBuildOptions o;
    o.model = model;
    o.version = next->version.value;
    o.parent = next->parent;
    o.created_unix_ms = transport::wall_clock_ms();
    o.shard_size = impl->shard_size;
    o.shard_hash = impl->shard_hash;
    // Hashed here, on the caller's thread and its helpers (or on the GPU):
    // the I/O thread goes on serving.
    auto manifest = build_manifest_in(domain, o, regions, tensors, *impl->identity);
    if (!manifest) return manifest.status();
    auto shared = std::make_shared<const Manifest>(std::move(*manifest));
    auto v = PeerAccess::created(*impl, [&] { return impl->engine->publish(shared, core::ConstRegions(regions), domain); });
    if (!v && v.status().code() == StatusCode::kAlreadyExists && attempt++ < kPublishAttempts) continue;
    if (!v) return v.status();
    return PeerAccess::publish_handle(impl, std::move(*v));
  }
}

Result<PublishHandle> Peer::publish_part(const std::string& model, std::uint64_t version, std::uint32_t part_index,
                                         std::uint32_t part_count, std::span<const ConstRegion> regions,
                                         std::vector<TensorEntry> tensors) {
  return peer::publish_part_from(*this, model, version, PartOf{part_index, part_count}, regions, std::move(tensors),
                                 peer::host_memory());
}

Result<PublishHandle> Peer::publish_part(const std::string& model, std::uint64_t version, std::uint32_t part_index,
                                         std::uint32_t part_count, std::span<const ConstRegion> regions,
                                         std::vector<TensorEntry> tensors, const MemoryOptions& options) {
  if (options.gpu.empty()) return publish_part(model, version, part_index, part_count, regions, std::move(tensors));
  auto gpu = PeerAccess::gpu(*impl_, options.gpu);
  if (!gpu) return gpu.status();
  return peer::publish_part_from(*this, model, version, PartOf{part_index, part_count}, regions, std::move(tensors),
                                 (*gpu)->domain());
}

Result<PublishHandle> Peer::publish_part(const std::string& model, std::uint64_t version, std::uint32_t part_index,
                                         std::uint32_t part_count, std::span<const ConstRegion> regions,
                                         std::vector<TensorEntry> tensors, const PartOptions& options) {
  if (options.views.empty()) {
    return publish_part(model, version, part_index, part_count, regions, std::move(tensors), options.memory);
  }
  if (!options.memory.gpu.empty()) {
    return Status::invalid_argument("declared views of a part in GPU memory are not built yet; declare none, or "
                                    "publish the part from host memory");
  }
  return peer::publish_part_from(*this, model, version, PartOf{part_index, part_count}, regions, std::move(tensors),
                                 peer::host_memory(), options.views);
}

Result<PublishHandle> peer::publish_part_from(Peer& peer, const std::string& model, std::uint64_t version,
                                              PartOf part, std::span<const ConstRegion> regions,
                                              std::vector<TensorEntry> tensors, const MemoryDomain& domain,
                                              std::span<const std::vector<TensorSelection>> views) {
  Impl* impl = &PeerAccess::impl(peer);
  if (version == kLatestVersion) {
    return Status::invalid_argument("a part names its version: the number the trainer hands every rank, from 1");
  }
  if (part.count == 0 || part.count > kMaxParts || part.index >= part.count) {
    return Status::invalid_argument("part " + std::to_string(part.index) + " of " + std::to_string(part.count) +
                                    ": the index must be below the count, which is 1 to " + std::to_string(kMaxParts));
  }
  for (const ConstRegion& r : regions) {
    if (r.empty()) return Status::invalid_argument("a region of the part is empty");
  }
  const auto head_deadline = std::chrono::steady_clock::now() + impl->publish_head_wait;
  while (true) {
    const std::uint64_t seen = impl->current_generation();
    auto parent = impl->call([&] { return impl->engine->part_parent(model, version); });
    if (!parent && parent.status().code() == StatusCode::kUnavailable && impl->wait_change(seen, head_deadline)) continue;
    if (!parent) return parent.status();
    // The parts of v chain to v - 1: while it is on its way here, wait.
    const bool previous_coming = version > 1 && impl->call([&] { return impl->engine->expects(model, version - 1); });
    if (previous_coming && impl->wait_change(seen, head_deadline)) continue;
    ManifestBuildOptions o;
    o.model = model;
    o.version = version;
    o.parent = *parent;
    // No creation time: a rank that publishes the same bytes again (after
    // a restart) makes the same manifest, not a second one for its slot.
    o.created_unix_ms = 0;
    o.shard_size = impl->shard_size;
    o.shard_hash = impl->shard_hash;
    o.part = part;
    o.views.assign(views.begin(), views.end());
    auto manifest = build_manifest_in(domain, o, regions, tensors, *impl->identity);
    if (!manifest) return manifest.status();
    auto shared = std::make_shared<const Manifest>(std::move(*manifest));
    auto v = PeerAccess::created(
        *impl, [&] { return impl->engine->publish_part(shared, core::ConstRegions(regions), views, domain); });
    if (!v) return v.status();
    return PeerAccess::publish_handle(impl, std::move(*v));
  }
}

std::optional<VersionInfo> Peer::latest(const std::string& model) const {
  return impl_->call([&] { return impl_->engine->latest(model); });
}

Result<VersionInfo> Peer::version_info(const std::string& model, std::uint64_t version) const {
  return impl_->call([&] { return impl_->engine->version_info(model, version); });
}

Result<Manifest> Peer::manifest(const std::string& model, std::uint64_t version) const {
  return impl_->call([&]() -> Result<Manifest> {
    auto m = impl_->engine->manifest(model, version);
    if (!m) return m.status();
    return Manifest(**m);
  });
}

Result<std::vector<TensorEntry>> Peer::tensors(const std::string& model, std::uint64_t version) const {
  return impl_->call([&]() -> Result<std::vector<TensorEntry>> {
    auto sealed = impl_->engine->sealed_version(model, version);
    if (!sealed) return sealed.status();
    if (*sealed) return std::vector<TensorEntry>((*sealed)->tensors().begin(), (*sealed)->tensors().end());
    auto m = impl_->engine->manifest(model, version);
    if (!m) return m.status();
    return std::vector<TensorEntry>((*m)->tensors().begin(), (*m)->tensors().end());
  });
}

Result<std::vector<TensorEntry>> Peer::tensors(const std::string& model, std::uint64_t version,
                                               std::span<const TensorSelection> selection) const {
  return impl_->call([&] { return impl_->engine->selection_layout(model, version, selection); });
}

void Peer::subscribe(const std::string& model, std::function<void(const VersionInfo&)> callback) {
  impl_->call([&] { impl_->engine->subscribe(model, std::move(callback)); });
}

Result<VersionInfo> Peer::wait_for_head(const std::string& model, std::uint64_t after, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const std::uint64_t seen = impl_->current_generation();
    auto head = latest(model);
    if (head && head->version > after) return *head;
    // A newer version signed twice will never become the head: say so.
    Status equivocation = impl_->call([&] { return impl_->engine->equivocation_above(model, after); });
    if (!equivocation.is_ok()) return equivocation;
    if (!impl_->wait_change(seen, deadline)) {
      const std::string what = "no head of '" + model + "' newer than v" + std::to_string(after) + " appeared";
      Status joined = impl_->call([&] { return impl_->engine->join_status(); });
      if (!joined.is_ok()) return joined.with_context(what);
      return Status::timeout(what);
    }
  }
}

Result<FetchHandle> Peer::fetch(const std::string& model, std::uint64_t version, std::span<std::byte> destination) {
  return fetch(model, version, destination.empty() ? std::span<const MutableRegion>() : std::span<const MutableRegion>(&destination, 1));
}

Result<FetchHandle> Peer::fetch(const std::string& model, std::uint64_t version, std::span<const MutableRegion> regions) {
  return peer::fetch_into(*this, model, version, regions, peer::host_memory());
}

Result<FetchHandle> Peer::fetch(const std::string& model, std::uint64_t version, std::span<const MutableRegion> regions,
                                const MemoryOptions& options) {
  if (options.gpu.empty()) return fetch(model, version, regions);
  if (regions.empty()) return Status::invalid_argument("a fetch into GPU memory needs its destination regions");
  auto gpu = PeerAccess::gpu(*impl_, options.gpu);
  if (!gpu) return gpu.status();
  return peer::fetch_into(*this, model, version, regions, (*gpu)->domain());
}

Result<FetchHandle> Peer::fetch_to_file(const std::string& model, std::uint64_t version, const std::string& path,
                                        const FileOptions& options) {
  return PeerAccess::fetch_to_file(*impl_, model, version, path, options);
}

Result<FetchHandle> PeerAccess::fetch_to_file(Impl& impl, const std::string& model, std::uint64_t version,
                                              const std::string& path, const FileOptions& options) {
  auto info = impl.call([&] { return impl.engine->version_info(model, version); });
  if (!info) return info.status();
  auto sealed = impl.call([&] { return impl.engine->sealed_version(info->model, info->version); });
  if (sealed && *sealed) {
    // A version in parts has no image of its own: the file is a
    // safetensors file of its tensors, whole, each part landing in it.
    const std::vector<TensorEntry> tensors((*sealed)->tensors().begin(), (*sealed)->tensors().end());
    auto output = peer::create_safetensors_output(path, tensors, options);
    if (!output) return output.status();
    const MutableRegion data[] = {output->data};
    auto handle = fetch_parts(impl, *sealed, data, output->file->domain(), output->file);
    if (!handle) output->file->fetch_failed();
    return handle;
  }
  auto file = core::MappedOutputFile::create(path, info->bytes, options.mode, options.overwrite);
  if (!file) return file.status();
  auto destination = std::make_shared<peer::FileDestination>(std::move(*file));
  auto v = created(impl, [&] {
    return impl.engine->fetch(info->model, info->version, core::MutableRegions(destination->bytes()),
                              destination->domain(), destination);
  });
  if (!v) return v.status();
  FetchHandle handle = fetch_handle(&impl, std::move(*v));
  handle.state_->file = std::move(destination);
  return handle;
}

Result<FetchHandle> Peer::fetch_selection(const std::string& model, std::uint64_t version,
                                          std::span<const TensorSelection> selection,
                                          std::span<const MutableRegion> regions) {
  return PeerAccess::fetch_selection(*impl_, model, version, selection, regions);
}

Result<FetchHandle> Peer::fetch_selection_to_file(const std::string& model, std::uint64_t version,
                                                  std::span<const TensorSelection> selection, const std::string& path,
                                                  const FileOptions& options) {
  return PeerAccess::fetch_selection_to_file(*impl_, model, version, selection, path, options);
}

Result<FetchHandle> PeerAccess::fetch_selection_to_file(Impl& impl, const std::string& model, std::uint64_t version,
                                                        std::span<const TensorSelection> selection,
                                                        const std::string& path, const FileOptions& options) {
  auto layout = impl.call([&] { return impl.engine->selection_layout(model, version, selection); });
  if (!layout) return layout.status();
  auto output = peer::create_safetensors_output(path, *layout, options);
  if (!output) return output.status();
  const MutableRegion data[] = {output->data};
  auto handle = fetch_selection(impl, model, version, selection, data, output->file);
  if (!handle) output->file->fetch_failed();
  return handle;
}

Result<FetchHandle> Peer::fetch_selection(const std::string& model, std::uint64_t version,
                                          std::span<const TensorSelection> selection,
                                          std::span<const MutableRegion> regions, const MemoryOptions& options) {
  auto domain = PeerAccess::domain_of(*impl_, options);
  if (!domain) return domain.status();
  return PeerAccess::fetch_selection(*impl_, model, version, selection, regions, nullptr, **domain);
}

Result<const peer::MemoryDomain*> PeerAccess::domain_of(Impl& impl, const MemoryOptions& options) {
  if (options.gpu.empty()) return &peer::host_memory();
  auto gpu = PeerAccess::gpu(impl, options.gpu);
  if (!gpu) return gpu.status();
  return &(*gpu)->domain();
}

Result<FetchHandle> peer::fetch_selection_into(Peer& peer, const std::string& model, std::uint64_t version,
                                               std::span<const TensorSelection> selection,
                                               std::span<const MutableRegion> regions, const MemoryDomain& domain) {
  return PeerAccess::fetch_selection(PeerAccess::impl(peer), model, version, selection, regions, nullptr, domain);
}

Result<FetchHandle> PeerAccess::fetch_selection(Impl& impl_ref, const std::string& model, std::uint64_t version,
                                                std::span<const TensorSelection> selection,
                                                std::span<const MutableRegion> regions,
                                                std::shared_ptr<peer::FileDestination> file,
                                                const peer::MemoryDomain& domain) {
  Impl* impl = &impl_ref;
  for (const MutableRegion& r : regions) {
    if (r.empty()) return Status::invalid_argument("a destination region is empty");
  }
  auto handle = impl->call([&]() -> Result<FetchHandle> {
    auto info = impl->engine->version_info(model, version);
    if (!info) return info.status();
    auto sealed = impl->engine->sealed_version(model, info->version);
    if (!sealed) return sealed.status();
    auto fetched = impl->engine->fetch_selection(model, info->version, selection, core::MutableRegions(regions),
                                                 file ? file->domain() : domain, file);
    if (!fetched) return fetched.status();
    std::vector<PeerAccess::Created> parts;
    for (auto& part : fetched->fetches.parts) parts.push_back({part, impl->engine->watch_of(part)});
    return PeerAccess::assembled_fetch_handle(impl, std::move(*info), std::move(*sealed), std::move(fetched->tensors),
                                              std::move(parts), std::move(fetched->fetches.whole),
                                              fetched->fetches.runs);
  });
  if (handle) handle->state_->file = std::move(file);
  return handle;
}

Result<FetchHandle> peer::fetch_into(Peer& peer, const std::string& model, std::uint64_t version,
                                     std::span<const MutableRegion> regions, const MemoryDomain& domain) {
  return PeerAccess::fetch_into(PeerAccess::impl(peer), model, version, regions, domain);
}

Result<FetchHandle> PeerAccess::fetch_into(Impl& impl_ref, const std::string& model, std::uint64_t version,
                                           std::span<const MutableRegion> regions, const peer::MemoryDomain& domain) {
  Impl* impl = &impl_ref;
  for (const MutableRegion& r : regions) {
    if (r.empty()) return Status::invalid_argument("a destination region is empty");
  }
  auto sealed = impl->call([&] { return impl->engine->sealed_version(model, version); });
  if (!sealed) return sealed.status();
  if (*sealed) return fetch_parts(*impl, *sealed, regions, domain);
  auto v = created(*impl, [&] { return impl->engine->fetch(model, version, core::MutableRegions(regions), domain); });
  if (!v) return v.status();
  return fetch_handle(impl, std::move(*v));
}

Result<FetchHandle> PeerAccess::fetch_parts(Impl& impl_ref, std::shared_ptr<const manifest::SealedVersion> sealed,
                                            std::span<const MutableRegion> regions, const peer::MemoryDomain& domain,
                                            std::shared_ptr<peer::FileDestination> file) {
  Impl* impl = &impl_ref;
  // One fetch per part, into the whole destination.
  auto handle = impl->call([&]() -> Result<FetchHandle> {
    auto fetched = impl->engine->fetch_parts(sealed, core::MutableRegions(regions), domain, file);
    if (!fetched) return fetched.status();
    std::vector<PeerAccess::Created> parts;
    for (auto& part : fetched->parts) parts.push_back({part, impl->engine->watch_of(part)});
    const manifest::SealedVersion& v = *sealed;
    return PeerAccess::assembled_fetch_handle(impl, VersionInfo{v.model(), v.version(), v.id(), v.total_size()}, sealed,
                                              std::vector<TensorEntry>(v.tensors().begin(), v.tensors().end()),
                                              std::move(parts), std::move(fetched->whole), fetched->runs);
  });
  if (handle) handle->state_->file = std::move(file);
  return handle;
}

std::vector<std::shared_ptr<peer::LocalVersion>> PeerAccess::versions_of(const FetchHandle& handle) {
  if (!handle.state_) return {};
  if (!handle.state_->assembled()) return {handle.state_->version};
  std::vector<std::shared_ptr<peer::LocalVersion>> out;
  for (const auto& part : handle.state_->parts) out.push_back(part->version);
  return out;
}

ManifestId PeerAccess::version_id_of(const FetchHandle& handle) {
  return handle.state_->info.id;
}

Result<const cuda::GpuMemory*> PeerAccess::gpu(Impl& impl, const std::string& uuid) {
  std::lock_guard lock(impl.gpus_mutex);
  auto& slot = impl.gpus[uuid];
  if (!slot) {
    Status opened = cuda::GpuMemory::open(uuid, impl.block_size, slot);
    if (!opened.is_ok()) {
      impl.gpus.erase(uuid);
      return opened;
    }
  }
  return slot.get();
}

Result<std::size_t> Peer::replicas(const std::string& model, std::uint64_t version) const {
  return impl_->call([&]() -> Result<std::size_t> {
    auto info = impl_->engine->version_info(model, version);
    if (!info) return info.status();
    return impl_->engine->replicas(info->id);
  });
}

Status Peer::set_members(std::vector<PublicKey> members) {
  return impl_->call([&] { return impl_->engine->set_members(std::move(members)); });
}

std::string Peer::status_json() const {
  return impl_->call([&] { return impl_->engine->status_json(); });
}

}  // namespace tensorhub
