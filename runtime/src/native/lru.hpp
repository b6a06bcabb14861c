// A least-recently-used map with an entry bound, for the native backend's memory level (loaded
// kernels). Not thread-safe: the owner locks. Evicted values are handed back to the caller so
// they can be destroyed outside its lock (destroying a loaded kernel unloads its code).
#pragma once
#include <cstddef>
#include <list>
#include <unordered_map>
#include <utility>
#include <vector>

namespace neuron::native {

template <class K, class V>
class Lru {
 public:
  // The value under `key` (now the most recently used), or null.
  V* find(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }

  // Inserts or replaces `key`, then evicts least recently used entries beyond `bound` into
  // *evicted (bound 0 keeps nothing).
  void put(const K& key, V value, std::size_t bound, std::vector<V>* evicted) {
    if (auto it = index_.find(key); it != index_.end()) {
      evicted->push_back(std::move(it->second->second));
      order_.erase(it->second);
      index_.erase(it);
    }
    order_.emplace_front(key, std::move(value));
    index_[key] = order_.begin();
    shrink(bound, evicted);
  }

  void shrink(std::size_t bound, std::vector<V>* evicted) {
    while (order_.size() > bound) {
      evicted->push_back(std::move(order_.back().second));
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

  std::size_t size() const { return order_.size(); }

 private:
  std::list<std::pair<K, V>> order_;  // most recently used first
  std::unordered_map<K, typename std::list<std::pair<K, V>>::iterator> index_;
};

}  // namespace neuron::native
