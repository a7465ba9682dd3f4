// The simulation's model-parallel instances: trainer ranks publish their
// images of each version (SlicePlan), and every rollout GPU fetches its
// slice's share of each, as a fetch by selection does in the runtime: one
// fetch per image, of the shards it wants.
#include "sim/swarm_simulation.hpp"

#include <algorithm>
#include <string>

namespace tensorhub::sim {

const std::vector<std::shared_ptr<const Manifest>>& SwarmSimulation::images(std::uint32_t number) {
  while (images_.size() < number) {
    const auto n = static_cast<std::uint32_t>(images_.size() + 1);
    std::vector<std::shared_ptr<const Manifest>> version;
    const auto& plan = plan_->images();
    for (std::size_t i = 0; i < plan.size(); ++i) {
      // Each image is a model of its own here: the runtime's parts and
      // views are named by one seal, which ideal membership hands out.
      std::string model = "policy.part-" + std::to_string(plan[i].rank);
      if (plan[i].slice != SlicePlan::kEverySlice) model += ".slice-" + std::to_string(plan[i].slice);
      const ManifestId parent = n > 1 ? images_.back()[i]->id() : ManifestId{};
      version.push_back(signed_manifest(model, n, parent, plan[i].layout, (scenario_.seed * 1000003 + n) * 65537 + i));
      version_numbers_[version.back()->id()] = n;
      image_index_[version.back()->id()] = i;
    }
    images_.push_back(std::move(version));
  }
  return images_[number - 1];
}

void SwarmSimulation::publish_images(std::uint32_t number) {
  const auto& version = images(number);
  const auto& plan = plan_->images();
  ledger_->publish(number, now());
  for (std::uint32_t t : trainers_) {
    if (!alive(t)) continue;
    SimPeer& p = peers_[t];
    if (number > 1) release(t, number - 1);  // the trainer's weights are the new version now
    for (std::size_t i = 0; i < plan.size(); ++i) {
      if (plan[i].rank != p.rank) continue;
      auto published = p.core->publish(now(), version[i], {});
      if (!published) throw std::logic_error("a trainer rank could not publish: " + published.status().to_string());
    }
    drain(t);
  }
  // Ideal membership: every worker gets the manifests of the images its
  // slice needs, and learns of their publisher and of every other worker
  // that fetches them, at once, in an order drawn for the version.
  std::vector<std::uint32_t> told(workers_.begin(), workers_.end());
  for (std::size_t i = told.size(); i > 1; --i) std::swap(told[i - 1], told[rng_.below(i)]);
  std::vector<std::vector<std::uint32_t>> fetchers(plan.size());
  for (std::uint32_t w : told) {
    if (!alive(w)) continue;
    SimPeer& p = peers_[w];
    std::size_t needed = 0;
    for (std::size_t i = 0; i < plan.size(); ++i) {
      if (plan_->wanted(i, p.slice).none()) continue;
      ++needed;
      fetchers[i].push_back(w);
    }
    p.images_left[number] = needed;
    for (std::size_t i = 0; i < plan.size(); ++i) {
      if (fetchers[i].empty() || fetchers[i].back() != w) continue;
      (void)p.core->learn_manifest(now(), version[i]);  // it fetches the image (fetch_image)
    }
    drain(w);
  }
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const ManifestId id = version[i]->id();
    const std::uint32_t publisher = trainers_[plan[i].rank];
    for (std::uint32_t w : fetchers[i]) {
      SimPeer& p = peers_[w];
      if (alive(publisher)) p.core->add_holder(now(), id, peers_[publisher].id, /*complete=*/true);
      for (std::uint32_t other : fetchers[i]) {
        if (other != w && alive(other)) p.core->add_holder(now(), id, peers_[other].id, false);
      }
    }
  }
  for (std::uint32_t w : told) {
    if (alive(w)) drain(w);
  }
}

void SwarmSimulation::fetch_image(std::uint32_t peer, const VersionInfo& head) {
  SimPeer& p = peers_[peer];
  auto index = image_index_.find(head.id);
  if (p.trainer || index == image_index_.end() || p.core->find(head.id)) return;
  auto m = p.core->resolve(head.model, number_of(head));
  if (!m) return;
  core::Bitfield wanted = plan_->wanted(index->second, p.slice);
  if (wanted.all()) wanted = core::Bitfield();  // the whole image: a view, fetched as any version is
  (void)p.core->fetch(now(), *m, {}, peer::host_memory(), std::nullopt, std::move(wanted));
}

void SwarmSimulation::on_image_done(std::uint32_t peer, const ManifestId& image_id, const Status& status) {
  auto number = version_numbers_.find(image_id);
  if (number == version_numbers_.end() || !status.is_ok()) return;
  SimPeer& p = peers_[peer];
  if (auto progress = p.core->swarm().progress(image_id)) requests_timed_out_ += progress->requests_timed_out;
  auto left = p.images_left.find(number->second);
  if (left == p.images_left.end() || left->second == 0 || --left->second != 0) return;
  p.images_left.erase(left);
  ledger_->worker_done(number->second, p.worker, now());
  if (number->second > 1) release(peer, number->second - 1);  // a double buffer
  advance_workload();
}

void SwarmSimulation::release_images(std::uint32_t peer, std::uint32_t number) {
  SimPeer& p = peers_[peer];
  if (number == 0 || number > images_.size()) return;
  for (const auto& image : images_[number - 1]) {
    if (auto v = p.core->find(image->id())) p.core->release(now(), v, peer::ReleaseMode::kNow);
  }
}

}  // namespace tensorhub::sim
