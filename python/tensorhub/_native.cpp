// tensorhub._native: a thin pybind11 binding of the public C++ API
// (include/tensorhub/). Memory crosses as (address, nbytes) pairs that the
// Python side takes from numpy arrays or torch tensors and keeps alive; no
// framework type is named here. Every call that waits releases the GIL, and
// no Python runs on the peer's threads.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <chrono>
#include <cstring>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensorhub/dtype.hpp"
#include "tensorhub/gpu_mapping.hpp"
#include "tensorhub/identity.hpp"
#include "tensorhub/manifest.hpp"
#include "tensorhub/peer.hpp"
#include "tensorhub/status.hpp"
#include "tensorhub/swarm_key.hpp"
#include "tensorhub/tensor.hpp"

namespace py = pybind11;
using namespace tensorhub;

namespace {

// (address, nbytes) of one region, as Python passes it.
using RegionSpec = std::pair<std::uintptr_t, std::uint64_t>;
// (name, dtype name, shape, byte offset, byte length), as the manifest lists it.
using TensorSpec = std::tuple<std::string, std::string, std::vector<std::uint64_t>, std::uint64_t, std::uint64_t>;
// A part's tensor: a TensorSpec, then its global shape and slice_begin (both
// empty for a whole tensor).
using PartTensorSpec = std::tuple<std::string, std::string, std::vector<std::uint64_t>, std::uint64_t, std::uint64_t,
                                  std::vector<std::uint64_t>, std::vector<std::uint64_t>>;

// tensorhub.Error, set by the package at import. A handle that is never
// released: a py::object here would drop its reference after the
// interpreter is gone, at process exit.
py::handle error_type;

[[noreturn]] void raise(const Status& s) {
  py::object e = error_type(s.to_string());
  e.attr("code") = std::string(status_code_id(s.code()));
  PyErr_SetObject(error_type.ptr(), e.ptr());
  throw py::error_already_set();
}
void check(const Status& s) {
  if (!s.is_ok()) raise(s);
}
template <typename T>
T value_or_raise(Result<T> r) {
  if (!r.is_ok()) raise(r.status());
  return std::move(*r);
}

std::chrono::milliseconds millis(std::optional<double> seconds) {
  if (!seconds) return std::chrono::milliseconds(std::chrono::hours(24 * 365));
  return std::chrono::milliseconds(static_cast<std::int64_t>(*seconds * 1000.0));
}

py::dict progress_dict(const FetchProgressInfo& p) {
  py::dict d;
  d["bytes_total"] = p.bytes_total;
  d["bytes_verified"] = p.bytes_verified;
  d["shards_total"] = p.shards_total;
  d["shards_verified"] = p.shards_verified;
  d["sources"] = p.sources;
  d["done"] = p.done;
  d["bytes_per_second"] = p.bytes_per_second;
  d["bytes_received"] = p.bytes_received;
  return d;
}

// A selection from Python: (tensor name, [(begin, end), ...]) each; no
// ranges for a whole tensor.
using SelectionSpec = std::vector<std::pair<std::string, std::vector<std::pair<std::uint64_t, std::uint64_t>>>>;

std::vector<TensorSelection> tensor_selection(const SelectionSpec& spec) {
  std::vector<TensorSelection> out;
  out.reserve(spec.size());
  for (const auto& [name, ranges] : spec) {
    TensorSelection s{name, {}};
    for (const auto& [begin, end] : ranges) s.slice.ranges.push_back(IndexRange{begin, end});
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<TensorSpec> tensor_specs(std::span<const TensorEntry> tensors) {
  std::vector<TensorSpec> out;
  for (const TensorEntry& t : tensors) {
    out.emplace_back(t.name, std::string(dtype_name(t.dtype)), t.shape, t.byte_offset, t.byte_length);
  }
  return out;
}

std::vector<TensorEntry> tensor_entries(const std::vector<TensorSpec>& specs) {
  std::vector<TensorEntry> out;
  out.reserve(specs.size());
  for (const auto& [name, dtype, shape, offset, length] : specs) {
    auto d = dtype_from_name(dtype);
    if (!d) raise(Status::invalid_argument("tensor '" + name + "': unknown dtype '" + dtype + "'"));
    out.push_back(TensorEntry{name, *d, shape, offset, length});
  }
  return out;
}

std::vector<TensorEntry> part_tensor_entries(const std::vector<PartTensorSpec>& specs) {
  std::vector<TensorEntry> out;
  out.reserve(specs.size());
  for (const auto& [name, dtype, shape, offset, length, global_shape, begin] : specs) {
    auto d = dtype_from_name(dtype);
    if (!d) raise(Status::invalid_argument("tensor '" + name + "': unknown dtype '" + dtype + "'"));
    out.push_back(TensorEntry{name, *d, shape, offset, length, global_shape, begin});
  }
  return out;
}

std::vector<ConstRegion> const_spans(const std::vector<RegionSpec>& regions) {
  std::vector<ConstRegion> spans;
  spans.reserve(regions.size());
  for (const auto& [address, nbytes] : regions) {
    spans.emplace_back(reinterpret_cast<const std::byte*>(address), static_cast<std::size_t>(nbytes));
  }
  return spans;
}

py::dict version_dict(const VersionInfo& v) {
  py::dict d;
  d["model"] = v.model;
  d["version"] = v.version;
  d["manifest_id"] = v.id.hex();
  d["nbytes"] = v.bytes;
  return d;
}

PeerOptions options_from(const py::dict& o) {
  PeerOptions p;
  auto get_str = [&](const char* k, std::string& out) {
    if (o.contains(k) && !o[k].is_none()) out = o[k].cast<std::string>();
  };
  get_str("listen", p.listen);
  get_str("data_listen", p.data_listen);
  get_str("advertise", p.advertise);
  get_str("dc", p.dc);
  get_str("rack", p.rack);
  get_str("host", p.host);
  if (o.contains("seeds") && !o["seeds"].is_none()) p.seeds = o["seeds"].cast<std::vector<std::string>>();
  auto keys = [&](const char* k, std::vector<PublicKey>& out) {
    if (!o.contains(k) || o[k].is_none()) return;
    for (const auto& hex : o[k].cast<std::vector<std::string>>()) {
      out.push_back(value_or_raise(PublicKey::from_hex(hex)));
    }
  };
  keys("trusted_publishers", p.trusted_publishers);
  keys("members", p.members);
  if (o.contains("shard_size") && !o["shard_size"].is_none()) p.shard_size = o["shard_size"].cast<std::uint64_t>();
  if (o.contains("block_size") && !o["block_size"].is_none()) p.block_size = o["block_size"].cast<std::uint32_t>();
  if (o.contains("retain_head_replicas") && !o["retain_head_replicas"].is_none()) {
    p.retain_head_replicas = o["retain_head_replicas"].cast<std::size_t>();
  }
  if (o.contains("rdma") && !o["rdma"].is_none()) p.rdma = o["rdma"].cast<bool>();
  if (o.contains("rdma_queue_pairs") && !o["rdma_queue_pairs"].is_none()) {
    p.rdma_queue_pairs = o["rdma_queue_pairs"].cast<std::size_t>();
  }
  if (o.contains("mirror_gpu_versions") && !o["mirror_gpu_versions"].is_none()) {
    p.mirror_gpu_versions = o["mirror_gpu_versions"].cast<bool>();
  }
  auto get_size = [&](const char* k, std::size_t& out) {
    if (o.contains(k) && !o[k].is_none()) out = o[k].cast<std::size_t>();
  };
  get_size("max_neighbours", p.max_neighbours);
  get_size("upload_slots", p.upload_slots);
  get_size("data_lanes", p.data_lanes);
  if (o.contains("require_secure_hash") && !o["require_secure_hash"].is_none()) {
    p.require_secure_hash = o["require_secure_hash"].cast<bool>();
  }
  if (o.contains("super_seed") && !o["super_seed"].is_none()) p.super_seed = o["super_seed"].cast<bool>();
  if (o.contains("shard_hash") && !o["shard_hash"].is_none()) {
    p.shard_hash = o["shard_hash"].cast<std::string>() == "blake2b-256" ? ShardHashAlgorithm::kBlake2b_256
                                                                         : ShardHashAlgorithm::kXxh3_128;
  }
  auto get_ms = [&](const char* key, std::chrono::milliseconds& out) {
    if (o.contains(key) && !o[key].is_none()) out = std::chrono::milliseconds(o[key].cast<std::int64_t>());
  };
  get_ms("max_release_deferral_ms", p.max_release_deferral);
  get_ms("start_timeout_ms", p.start_timeout);
  get_ms("publish_head_wait_ms", p.publish_head_wait);
  return p;
}

// A peer leaves gracefully when dropped (up to 4 s): not with the GIL held.
struct DeletePeerWithoutGil {
  void operator()(Peer* peer) const {
    py::gil_scoped_release nogil;
    delete peer;
  }
};
using PeerHolder = std::unique_ptr<Peer, DeletePeerWithoutGil>;

// A handle with the Python object that owns its memory: the handle goes
// first (its release waits for reads and writes in flight, without the GIL),
// then the memory.
template <typename Handle>
struct Owned {
  py::object owner;
  std::unique_ptr<Handle> handle;
  Owned(py::object o, Handle h) : owner(std::move(o)), handle(std::make_unique<Handle>(std::move(h))) {}
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (handle) {
      py::gil_scoped_release nogil;
      handle.reset();
    }
  }
  void release() {
    if (!handle) return;
    {
      py::gil_scoped_release nogil;
      handle->release();
    }
  }
  Handle& get() const {
    if (!handle) raise(Status::cancelled("released"));
    return *handle;
  }
};
using Published = Owned<PublishHandle>;
using Fetched = Owned<FetchHandle>;

// Unmapping closes the CUDA IPC handle: not with the GIL held. reset()
// empties the pointer before it calls this, so another thread sees the
// mapping closed, never half unmapped.
struct UnmapWithoutGil {
  void operator()(GpuMapping* mapping) const {
    py::gil_scoped_release nogil;
    delete mapping;
  }
};

// A rank of a group; leaving (its end, or leave()) waits for the I/O
// thread: not with the GIL held.
// Each call copies the pointer with the GIL held and uses its copy without
// it, so a leave() on another thread never frees a Group in use.
struct GroupRank {
  std::shared_ptr<Group> group;
  std::shared_ptr<Group> get() const {
    if (!group) raise(Status::cancelled("this rank left the group"));
    return group;
  }
  void leave() {
    std::shared_ptr<Group> last = std::move(group);  // with the GIL: one caller takes it
    py::gil_scoped_release nogil;
    last.reset();  // leaves once no call uses it
  }
  ~GroupRank() {
    if (group) leave();
  }
};

std::vector<MutableRegion> mutable_regions(const std::vector<RegionSpec>& regions) {
  std::vector<MutableRegion> spans;
  spans.reserve(regions.size());
  for (const auto& [address, nbytes] : regions) {
    spans.emplace_back(reinterpret_cast<std::byte*>(address), static_cast<std::size_t>(nbytes));
  }
  return spans;
}

// A range of GPU memory another process shares (a daemon's hold on a GPU):
// mapped until close() or the object's end.
struct Mapping {
  std::unique_ptr<GpuMapping, UnmapWithoutGil> mapping;
  GpuMapping& get() const {
    if (!mapping) raise(Status::cancelled("the GPU mapping is closed"));
    return *mapping;
  }
};

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "TensorHub's C++ peer (use the tensorhub package, not this module)";
  m.def("_set_error_type", [](py::object type) { error_type = type.release(); });

  m.def("generate_key", [] {
    const Identity id = Identity::generate();
    return id.public_key().hex();
  });
  m.def("public_key_of", [](const std::string& key_file) {
    std::optional<Result<Identity>> id;
    {
      py::gil_scoped_release nogil;
      id.emplace(Identity::load(key_file));
    }
    return value_or_raise(std::move(*id)).public_key().hex();
  });

  py::class_<Published, std::unique_ptr<Published>>(m, "Published")
      .def_property_readonly("version", [](const Published& p) { return p.get().info().version; })
      .def_property_readonly("manifest_id", [](const Published& p) { return p.get().info().id.hex(); })
      .def_property_readonly("nbytes", [](const Published& p) { return p.get().manifest().total_size(); })
      .def_property_readonly("tensors", [](const Published& p) { return tensor_specs(p.get().manifest().tensors()); })
      .def_property_readonly("bytes_served", [](const Published& p) { return p.get().bytes_served(); })
      .def("wait_replicated",
           [](Published& p, std::size_t replicas, std::optional<double> timeout) {
             Status s;
             {
               py::gil_scoped_release nogil;
               s = p.get().wait_replicated(replicas, millis(timeout));
             }
             check(s);
           },
           py::arg("replicas"), py::arg("timeout") = py::none())
      .def("wait_sealed",
           [](Published& p, std::optional<double> timeout) {
             Status s;
             {
               py::gil_scoped_release nogil;
               s = p.get().wait_sealed(millis(timeout));
             }
             check(s);
           },
           py::arg("timeout") = py::none())
      .def("release", &Published::release);

  py::class_<GroupRank, std::unique_ptr<GroupRank>>(m, "Group")
      .def_property_readonly("name", [](const GroupRank& g) { return g.get()->name(); })
      .def_property_readonly("size", [](const GroupRank& g) { return g.get()->size(); })
      .def_property_readonly("rank", [](const GroupRank& g) { return g.get()->rank(); })
      .def("fetch",
           [](GroupRank& g, const std::string& model, std::uint64_t version, const std::vector<RegionSpec>& regions,
              py::object owner, const std::string& gpu) {
             const std::vector<MutableRegion> spans = mutable_regions(regions);
             const std::shared_ptr<Group> group = g.get();  // raises with the GIL held
             Result<FetchHandle> r = Status::internal("not fetched");
             {
               py::gil_scoped_release nogil;
               r = group->fetch(model, version, spans, MemoryOptions{gpu});
             }
             return std::make_unique<Fetched>(std::move(owner), value_or_raise(std::move(r)));
           },
           py::arg("model"), py::arg("version"), py::arg("regions"), py::arg("owner"), py::arg("gpu") = "",
           py::keep_alive<0, 1>())
      .def("fetch_selection",
           [](GroupRank& g, const std::string& model, std::uint64_t version, const SelectionSpec& selection,
              const std::vector<RegionSpec>& regions, py::object owner, const std::string& gpu) {
             const std::vector<MutableRegion> spans = mutable_regions(regions);
             const std::vector<TensorSelection> selected = tensor_selection(selection);
             const std::shared_ptr<Group> group = g.get();  // raises with the GIL held
             Result<FetchHandle> r = Status::internal("not fetched");
             {
               py::gil_scoped_release nogil;
               r = gpu.empty() ? group->fetch_selection(model, version, selected, spans)
                               : group->fetch_selection(model, version, selected, spans, MemoryOptions{gpu});
             }
             return std::make_unique<Fetched>(std::move(owner), value_or_raise(std::move(r)));
           },
           py::arg("model"), py::arg("version"), py::arg("selection"), py::arg("regions"), py::arg("owner"),
           py::arg("gpu") = "", py::keep_alive<0, 1>())
      .def("commit",
           [](GroupRank& g, std::uint64_t version, std::optional<double> timeout) {
             const std::shared_ptr<Group> group = g.get();
             Status s;
             {
               py::gil_scoped_release nogil;
               s = group->commit(version, millis(timeout));
             }
             check(s);
           },
           py::arg("version"), py::arg("timeout") = py::none())
      .def("committed",
           [](const GroupRank& g, const std::string& model) {
             const std::shared_ptr<Group> group = g.get();
             Result<std::optional<std::uint64_t>> v = Status::internal("not asked");
             {
               py::gil_scoped_release nogil;
               v = group->committed(model);
             }
             return value_or_raise(std::move(v));
           })
      .def("leave", &GroupRank::leave);

  py::class_<Fetched, std::unique_ptr<Fetched>>(m, "Fetched")
      .def_property_readonly("info", [](const Fetched& f) { return version_dict(f.get().info()); })
      .def_property_readonly("tensors", [](const Fetched& f) { return tensor_specs(f.get().tensors()); })
      .def("verified_shards",
           [](const Fetched& f) {
             const FetchHandle& h = f.get();
             std::vector<bool> flags;
             {
               py::gil_scoped_release nogil;
               flags = h.verified_shards();
             }
             return flags;
           })
      .def("verified_tensors",
           [](const Fetched& f) {
             const FetchHandle& h = f.get();
             std::vector<bool> flags;
             {
               py::gil_scoped_release nogil;
               flags = h.verified_tensors();
             }
             return flags;
           })
      .def("progress", [](const Fetched& f) { return progress_dict(f.get().progress()); })
      .def("wait_progress",
           [](const Fetched& f, std::uint32_t shards_verified, std::optional<double> timeout) {
             const FetchHandle& h = f.get();
             FetchProgressInfo p;
             {
               py::gil_scoped_release nogil;
               p = h.wait_progress(shards_verified, millis(timeout));
             }
             return progress_dict(p);
           },
           py::arg("shards_verified"), py::arg("timeout") = py::none())
      .def("wait",
           [](Fetched& f, std::optional<double> timeout) {
             Status s;
             {
               py::gil_scoped_release nogil;
               s = f.get().wait(millis(timeout));
             }
             check(s);
           },
           py::arg("timeout") = py::none())
      .def("release", &Fetched::release);

  py::class_<Mapping>(m, "GpuMapping")
      .def(py::init([](py::bytes handle, std::uint64_t offset, std::uint64_t length, const std::string& gpu) {
             const std::string bytes = handle;
             const auto* data = reinterpret_cast<const std::uint8_t*>(bytes.data());
             std::optional<Result<std::unique_ptr<GpuMapping>>> r;
             {
               py::gil_scoped_release nogil;
               r.emplace(GpuMapping::open({data, bytes.size()}, offset, length, gpu));
             }
             return Mapping{std::unique_ptr<GpuMapping, UnmapWithoutGil>(value_or_raise(std::move(*r)).release())};
           }),
           py::arg("handle"), py::arg("offset"), py::arg("length"), py::arg("gpu"))
      .def_property_readonly("address", [](const Mapping& g) { return g.get().address(); })
      .def_property_readonly("nbytes", [](const Mapping& g) { return g.get().size(); })
      .def("close", [](Mapping& g) { g.mapping.reset(); });  // unmaps without the GIL (UnmapWithoutGil)

  py::class_<Peer, PeerHolder>(m, "Peer")
      .def_static(
          "start",
          [](const py::dict& options, std::optional<std::string> key_file, std::optional<py::bytes> swarm_key,
             std::optional<std::string> swarm_key_file) {
            PeerOptions o;
            try {
              o = options_from(options);
            } catch (const py::cast_error& e) {
              raise(Status::invalid_argument(std::string("a peer option has the wrong type or range: ") + e.what()));
            }
            // The swarm key's bytes are taken from Python with the GIL held;
            // the key files are read without it, and any error is raised
            // after, in the order the checks run.
            std::optional<std::string> key_bytes;
            if (!swarm_key_file && swarm_key) {
              std::string bytes = *swarm_key;
              key_bytes = std::move(bytes);
            }
            std::optional<Result<std::unique_ptr<Peer>>> peer;
            {
              py::gil_scoped_release nogil;
              peer.emplace([&]() -> Result<std::unique_ptr<Peer>> {
                Result<Identity> identity =
                    key_file ? Identity::load(*key_file) : Result<Identity>(Identity::generate());
                if (!identity.is_ok()) return identity.status();
                SwarmKey key = SwarmKey::generate();
                if (swarm_key_file) {
                  Result<SwarmKey> loaded = SwarmKey::load(*swarm_key_file);
                  if (!loaded.is_ok()) return loaded.status();
                  key = *loaded;
                } else if (key_bytes) {
                  if (key_bytes->size() != 32) return Status::invalid_argument("a swarm key is 32 bytes");
                  std::array<std::uint8_t, 32> raw{};
                  std::memcpy(raw.data(), key_bytes->data(), 32);
                  key = SwarmKey::from_bytes(raw);
                } else {
                  return Status::invalid_argument("a swarm key is needed (swarm_key or swarm_key_file)");
                }
                return Peer::start(std::move(o), std::move(*identity), std::move(key));
              }());
            }
            return PeerHolder(value_or_raise(std::move(*peer)).release());
          },
          py::arg("options"), py::arg("key_file") = py::none(), py::arg("swarm_key") = py::none(),
          py::arg("swarm_key_file") = py::none())
      .def_property_readonly("id", [](const Peer& p) { return p.id().hex(); })
      .def_property_readonly("gossip_address",
                             [](const Peer& p) {
                               std::string address;
                               {
                                 py::gil_scoped_release nogil;
                                 address = p.gossip_address();
                               }
                               return address;
                             })
      .def("publish",
           [](Peer& p, const std::string& model, const std::vector<RegionSpec>& regions,
              const std::vector<TensorSpec>& tensors, py::object owner, const std::string& gpu) {
             std::vector<ConstRegion> spans = const_spans(regions);
             std::vector<TensorEntry> entries = tensor_entries(tensors);
             Result<PublishHandle> r = Status::internal("not published");
             {
               py::gil_scoped_release nogil;
               r = p.publish(model, spans, std::move(entries), MemoryOptions{gpu});
             }
             return std::make_unique<Published>(std::move(owner), value_or_raise(std::move(r)));
           },
           // A handle keeps its peer alive: released after the peer, it would call into nothing.
           py::arg("model"), py::arg("regions"), py::arg("tensors"), py::arg("owner"), py::arg("gpu") = "",
           py::keep_alive<0, 1>())
      .def("publish_part",
           [](Peer& p, const std::string& model, std::uint64_t version, std::uint32_t index, std::uint32_t count,
              const std::vector<RegionSpec>& regions, const std::vector<PartTensorSpec>& tensors, py::object owner,
              const std::string& gpu, const std::vector<SelectionSpec>& views) {
             std::vector<ConstRegion> spans = const_spans(regions);
             std::vector<TensorEntry> entries = part_tensor_entries(tensors);
             PartOptions options;
             options.memory.gpu = gpu;
             for (const SelectionSpec& view : views) options.views.push_back(tensor_selection(view));
             Result<PublishHandle> r = Status::internal("not published");
             {
               py::gil_scoped_release nogil;
               r = p.publish_part(model, version, index, count, spans, std::move(entries), options);
             }
             return std::make_unique<Published>(std::move(owner), value_or_raise(std::move(r)));
           },
           py::arg("model"), py::arg("version"), py::arg("index"), py::arg("count"), py::arg("regions"),
           py::arg("tensors"), py::arg("owner"), py::arg("gpu") = "", py::arg("views") = std::vector<SelectionSpec>{},
           py::keep_alive<0, 1>())
      .def("latest",
           [](const Peer& p, const std::string& model) -> py::object {
             std::optional<VersionInfo> v;
             {
               py::gil_scoped_release nogil;
               v = p.latest(model);
             }
             return v ? py::object(version_dict(*v)) : py::object(py::none());
           })
      .def("version_info",
           [](const Peer& p, const std::string& model, std::uint64_t version) {
             std::optional<Result<VersionInfo>> r;
             {
               py::gil_scoped_release nogil;
               r.emplace(p.version_info(model, version));
             }
             return version_dict(value_or_raise(std::move(*r)));
           })
      .def("version_tensors",
           [](const Peer& p, const std::string& model, std::uint64_t version) {
             std::optional<Result<std::vector<TensorEntry>>> r;
             {
               py::gil_scoped_release nogil;
               r.emplace(p.tensors(model, version));
             }
             return tensor_specs(value_or_raise(std::move(*r)));
           })
      .def("selection_tensors",
           [](const Peer& p, const std::string& model, std::uint64_t version, const SelectionSpec& selection) {
             const std::vector<TensorSelection> selected = tensor_selection(selection);
             std::optional<Result<std::vector<TensorEntry>>> r;
             {
               py::gil_scoped_release nogil;
               r.emplace(p.tensors(model, version, selected));
             }
             return tensor_specs(value_or_raise(std::move(*r)));
           })
      .def("fetch_selection",
           [](Peer& p, const std::string& model, std::uint64_t version, const SelectionSpec& selection,
              const std::vector<RegionSpec>& regions, py::object owner, const std::string& gpu) {
             const std::vector<MutableRegion> spans = mutable_regions(regions);
             const std::vector<TensorSelection> selected = tensor_selection(selection);
             Result<FetchHandle> r = Status::internal("not fetched");
             {
               py::gil_scoped_release nogil;
               r = gpu.empty() ? p.fetch_selection(model, version, selected, spans)
                               : p.fetch_selection(model, version, selected, spans, MemoryOptions{gpu});
             }
             return std::make_unique<Fetched>(std::move(owner), value_or_raise(std::move(r)));
           },
           py::arg("model"), py::arg("version"), py::arg("selection"), py::arg("regions"), py::arg("owner"),
           py::arg("gpu") = "", py::keep_alive<0, 1>())
      .def("wait_for_head",
           [](Peer& p, const std::string& model, std::uint64_t after, std::optional<double> timeout) {
             Result<VersionInfo> r = Status::internal("not waited");
             {
               py::gil_scoped_release nogil;
               r = p.wait_for_head(model, after, millis(timeout));
             }
             return version_dict(value_or_raise(std::move(r)));
           },
           py::arg("model"), py::arg("after") = 0, py::arg("timeout") = py::none())
      .def("fetch",
           [](Peer& p, const std::string& model, std::uint64_t version, const std::vector<RegionSpec>& regions,
              py::object owner, const std::string& gpu) {
             const std::vector<MutableRegion> spans = mutable_regions(regions);
             Result<FetchHandle> r = Status::internal("not fetched");
             {
               py::gil_scoped_release nogil;
               r = p.fetch(model, version, spans, MemoryOptions{gpu});
             }
             return std::make_unique<Fetched>(std::move(owner), value_or_raise(std::move(r)));
           },
           py::arg("model"), py::arg("version"), py::arg("regions"), py::arg("owner"), py::arg("gpu") = "",
           py::keep_alive<0, 1>())
      .def("group",
           [](Peer& p, const std::string& name, std::uint32_t size, std::uint32_t rank) {
             Result<Group> r = Status::internal("not joined");
             {
               py::gil_scoped_release nogil;
               r = p.group(name, size, rank);
             }
             auto out = std::make_unique<GroupRank>();
             out->group = std::make_shared<Group>(value_or_raise(std::move(r)));
             return out;
           },
           // No keep_alive: a Group reaches its peer through the handles' gate, so
           // closing the peer ends it (every call then raises cancelled).
           py::arg("name"), py::arg("size"), py::arg("rank"))
      .def("fetch_to_file",
           [](Peer& p, const std::string& model, std::uint64_t version, const std::string& path, unsigned mode,
              bool overwrite) {
             Result<FetchHandle> r = Status::internal("not fetched");
             {
               py::gil_scoped_release nogil;
               r = p.fetch_to_file(model, version, path, FileOptions{mode, overwrite});
             }
             return std::make_unique<Fetched>(py::none(), value_or_raise(std::move(r)));
           },
           py::arg("model"), py::arg("version"), py::arg("path"), py::arg("mode"), py::arg("overwrite"),
           py::keep_alive<0, 1>())
      .def("fetch_selection_to_file",
           [](Peer& p, const std::string& model, std::uint64_t version, const SelectionSpec& selection,
              const std::string& path, unsigned mode, bool overwrite) {
             const std::vector<TensorSelection> selected = tensor_selection(selection);
             Result<FetchHandle> r = Status::internal("not fetched");
             {
               py::gil_scoped_release nogil;
               r = p.fetch_selection_to_file(model, version, selected, path, FileOptions{mode, overwrite});
             }
             return std::make_unique<Fetched>(py::none(), value_or_raise(std::move(r)));
           },
           py::arg("model"), py::arg("version"), py::arg("selection"), py::arg("path"), py::arg("mode"),
           py::arg("overwrite"), py::keep_alive<0, 1>())
      .def("replicas", [](const Peer& p, const std::string& model, std::uint64_t version) {
        std::optional<Result<std::size_t>> r;
        {
          py::gil_scoped_release nogil;
          r.emplace(p.replicas(model, version));
        }
        return value_or_raise(std::move(*r));
      }, py::arg("model"), py::arg("version"))
      .def("status_json", [](const Peer& p) {
        std::string json;
        {
          py::gil_scoped_release nogil;
          json = p.status_json();
        }
        return json;
      });
}
