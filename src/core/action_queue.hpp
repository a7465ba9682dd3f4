// The queue through which a sans-I/O core hands its actions to the driver:
// first in, first out, drained by poll() until empty.
//
// A core emits a few actions per event and its driver drains them all before
// the next event, so the queue is a vector read from the front and emptied
// (capacity kept) once read to the end. Unlike a deque, which allocates a
// new chunk every few pushes in steady FIFO use, it allocates only while
// growing to its high-water mark. push() while draining is allowed.
#pragma once

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

namespace tensorhub::core {

template <typename Action>
class ActionQueue {
 public:
  void push(Action action) { items_.push_back(std::move(action)); }

  template <typename... Args>
  void emplace(Args&&... args) {
    items_.emplace_back(std::forward<Args>(args)...);
  }

  std::optional<Action> poll() {
    if (head_ == items_.size()) return std::nullopt;
    std::optional<Action> a(std::move(items_[head_++]));
    if (head_ == items_.size()) {
      items_.clear();
      head_ = 0;
    }
    return a;
  }

  bool empty() const { return head_ == items_.size(); }
  std::size_t size() const { return items_.size() - head_; }

 private:
  // Invariant: head_ <= items_.size(); items before head_ are moved-from.
  std::vector<Action> items_;
  std::size_t head_ = 0;
};

}  // namespace tensorhub::core
