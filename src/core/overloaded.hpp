// One visitor from several lambdas, for std::visit over an action variant:
// without a catch-all overload, a variant alternative that no lambda takes
// does not compile, so a driver cannot forget an action.
#pragma once

namespace tensorhub::core {

template <typename... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <typename... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

}  // namespace tensorhub::core
