// Group: one rank of a model-parallel group, over the engine's group calls
// (peer/group_book.hpp holds the rules).
#include <chrono>

#include "transport/peer_impl.hpp"
#include "transport/peer_internal.hpp"

namespace tensorhub {

struct Group::State {
  std::shared_ptr<PeerAccess::Impl::Gate> gate;
  std::string name;
  std::uint32_t size = 0;
  std::uint32_t rank = 0;

  ~State() {
    handles::through_gate(*gate, [&](PeerAccess::Impl& impl) { impl.call([&] { impl.engine->leave_group(name); }); });
  }
  // Runs fn(impl) while the peer is there; kCancelled once it is going.
  template <typename R, typename F>
  R with_peer(F&& fn) {
    std::optional<R> out;
    const bool ran = handles::through_gate(*gate, [&](PeerAccess::Impl& impl) { out.emplace(fn(impl)); });
    if (!ran) return R(Status::cancelled("the peer of rank " + std::to_string(rank) + " of group " + name + " has stopped"));
    return std::move(*out);
  }
  Result<FetchHandle> stage(const std::string& model, std::uint64_t version, std::span<const MutableRegion> regions,
                            const MemoryOptions& options);
  // Stages the fetch `start(impl)` begins of `model` v`version`.
  template <typename F>
  Result<FetchHandle> stage_fetch(const std::string& model, std::uint64_t version, F&& start) {
    if (version == kLatestVersion) {
      return Status::invalid_argument("a group stages an explicit version (the trainer's number), not the latest");
    }
    return with_peer<Result<FetchHandle>>([&](PeerAccess::Impl& impl) -> Result<FetchHandle> {
      auto handle = start(impl);
      if (!handle) return handle.status();
      const ManifestId id = PeerAccess::version_id_of(*handle);
      auto versions = PeerAccess::versions_of(*handle);
      Status staged = impl.call([&] { return impl.engine->stage_for_group(name, model, version, id, std::move(versions)); });
      if (!staged.is_ok()) return staged;  // the handle goes: its release lets the version go
      return handle;
    });
  }
};

Group::Group(std::shared_ptr<State> state) : state_(std::move(state)) {}
Group::~Group() = default;
Group::Group(Group&&) noexcept = default;
Group& Group::operator=(Group&&) noexcept = default;

const std::string& Group::name() const { return state_->name; }
std::uint32_t Group::size() const { return state_->size; }
std::uint32_t Group::rank() const { return state_->rank; }

Result<FetchHandle> Group::State::stage(const std::string& model, std::uint64_t version,
                                        std::span<const MutableRegion> regions, const MemoryOptions& options) {
  return stage_fetch(model, version, [&](PeerAccess::Impl& impl) -> Result<FetchHandle> {
    const peer::MemoryDomain* domain = &peer::host_memory();
    if (!options.gpu.empty()) {
      if (regions.empty()) return Status::invalid_argument("a fetch into GPU memory needs its destination regions");
      auto gpu = PeerAccess::gpu(impl, options.gpu);
      if (!gpu) return gpu.status();
      domain = &(*gpu)->domain();
    }
    return PeerAccess::fetch_into(impl, model, version, regions, *domain);
  });
}

Result<FetchHandle> Group::fetch_selection(const std::string& model, std::uint64_t version,
                                           std::span<const TensorSelection> selection,
                                           std::span<const MutableRegion> regions) {
  return state_->stage_fetch(model, version, [&](PeerAccess::Impl& impl) {
    return PeerAccess::fetch_selection(impl, model, version, selection, regions);
  });
}

Result<FetchHandle> Group::fetch_selection(const std::string& model, std::uint64_t version,
                                           std::span<const TensorSelection> selection,
                                           std::span<const MutableRegion> regions, const MemoryOptions& options) {
  return state_->stage_fetch(model, version, [&](PeerAccess::Impl& impl) -> Result<FetchHandle> {
    auto domain = PeerAccess::domain_of(impl, options);
    if (!domain) return domain.status();
    return PeerAccess::fetch_selection(impl, model, version, selection, regions, nullptr, **domain);
  });
}

Result<FetchHandle> Group::fetch_to_file(const std::string& model, std::uint64_t version, const std::string& path,
                                         const FileOptions& options) {
  return state_->stage_fetch(model, version, [&](PeerAccess::Impl& impl) {
    return PeerAccess::fetch_to_file(impl, model, version, path, options);
  });
}

Result<FetchHandle> Group::fetch_selection_to_file(const std::string& model, std::uint64_t version,
                                                   std::span<const TensorSelection> selection, const std::string& path,
                                                   const FileOptions& options) {
  return state_->stage_fetch(model, version, [&](PeerAccess::Impl& impl) {
    return PeerAccess::fetch_selection_to_file(impl, model, version, selection, path, options);
  });
}

Result<FetchHandle> Group::fetch(const std::string& model, std::uint64_t version, std::span<std::byte> destination) {
  return state_->stage(model, version,
                       destination.empty() ? std::span<const MutableRegion>() : std::span<const MutableRegion>(&destination, 1),
                       MemoryOptions{});
}

Result<FetchHandle> Group::fetch(const std::string& model, std::uint64_t version, std::span<const MutableRegion> regions,
                                 const MemoryOptions& options) {
  return state_->stage(model, version, regions, options);
}

Status Group::commit(std::uint64_t version, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::uint64_t seen = 0;
    Status committed = state_->with_peer<Status>([&](PeerAccess::Impl& impl) {
      seen = impl.current_generation();
      return impl.call([&] { return impl.engine->commit_group(state_->name, version); });
    });
    if (committed.is_ok()) return committed;
    if (committed.code() != StatusCode::kUnavailable || std::chrono::steady_clock::now() >= deadline) {
      // This rank stops waiting: the others must not count it as committing.
      handles::through_gate(*state_->gate, [&](PeerAccess::Impl& impl) {
        impl.call([&] { impl.engine->withdraw_from_commit(state_->name, version); });
      });
      if (committed.code() != StatusCode::kUnavailable) return committed;
      return Status::timeout("after " + std::to_string(timeout.count()) + " ms: " + committed.message());
    }
    // Group states and silences move the generation; wake each heartbeat anyway.
    const auto wake = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(500));
    handles::through_gate(*state_->gate, [&](PeerAccess::Impl& impl) { impl.wait_change(seen, wake); });
  }
}

Result<std::optional<std::uint64_t>> Group::committed(const std::string& model) const {
  return state_->with_peer<Result<std::optional<std::uint64_t>>>(
      [&](PeerAccess::Impl& impl) -> Result<std::optional<std::uint64_t>> {
        return impl.call([&] { return impl.engine->group_committed(state_->name, model); });
      });
}

Result<Group> Peer::group(const std::string& name, std::uint32_t size, std::uint32_t rank) {
  Status joined = impl_->call([&] { return impl_->engine->join_group(name, size, rank); });
  if (!joined.is_ok()) return joined;
  auto state = std::make_shared<Group::State>();
  state->gate = impl_->gate;
  state->name = name;
  state->size = size;
  state->rank = rank;
  return Group(std::move(state));
}

}  // namespace tensorhub
