// NamedRegistry: the one registry of every plugin kind (offload policies,
// engine/offload/policy_registry.h; drafters,
// engine/spec_decode/drafter_registry.h), as TF Serving's class_registry.h
// serves every kind of its plugins.
//
// A plugin registers an entry (its factory and traits) under a name from a
// static initialiser in its own .cc (alwayslink), so adding one touches no
// central file. A name registered twice is a link-time mistake: Register
// aborts with a message naming the kind and the name, at startup.
//
// Ownership: entries are never removed; a pointer Find returns stays valid
// for the registry's life (registries are leaked function-local statics).
// Thread safety: every member may be called from any thread; entries are
// immutable once registered.
#ifndef MOESERVE_BASE_NAMED_REGISTRY_H_
#define MOESERVE_BASE_NAMED_REGISTRY_H_

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/mutex.h"

namespace moeserve::base {

template <typename Entry>
class NamedRegistry {
 public:
  // `kind` names what the registry holds in messages ("offload policy").
  explicit NamedRegistry(std::string kind) : kind_(std::move(kind)) {}
  NamedRegistry(const NamedRegistry&) = delete;
  NamedRegistry& operator=(const NamedRegistry&) = delete;

  // Registers `entry` as `name`; returns true (for static initialisers).
  // Aborts when `name` is already registered.
  bool Register(std::string_view name, Entry entry) {
    MutexLock lock(&mu_);
    if (!entries_.emplace(std::string(name), std::move(entry)).second) {
      std::fprintf(stderr, "moeserve: %s '%.*s' registered twice\n",
                   kind_.c_str(), static_cast<int>(name.size()), name.data());
      std::abort();
    }
    return true;
  }

  // The entry registered as `name`, or null.
  const Entry* Find(std::string_view name) const {
    MutexLock lock(&mu_);
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }

  // Registered names, sorted.
  std::vector<std::string> Names() const {
    MutexLock lock(&mu_);
    std::vector<std::string> names;
    names.reserve(entries_.size());
    for (const auto& [name, entry] : entries_) names.push_back(name);
    return names;  // std::map: already sorted
  }

  // What the registry holds, as given to the constructor.
  const std::string& kind() const { return kind_; }

 private:
  const std::string kind_;
  mutable Mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moeserve::base

#endif  // MOESERVE_BASE_NAMED_REGISTRY_H_
