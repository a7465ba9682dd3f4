#include "swarm/slot_share.hpp"

#include <algorithm>

namespace tensorhub::swarm {

void SlotShare::handed_back(const PeerId& peer) {
  if (std::find(declined_.begin(), declined_.end(), peer) == declined_.end()) declined_.push_back(peer);
}

void SlotShare::ended(const PeerId& peer) {
  std::erase(declined_, peer);
  asked_again_.erase(peer);
}

void SlotShare::clear() {
  declined_.clear();
  asked_again_.clear();
}

}  // namespace tensorhub::swarm
