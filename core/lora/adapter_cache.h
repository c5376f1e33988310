#pragma once
// The adapters of a serving run, loaded on demand (LoRAX / S-LoRA): at most `capacity` are held;
// loading one more evicts the least recently used adapter that no running request holds. A
// request pins its adapter from admission to retirement.
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lora/lora_spec.h"

namespace servelab {

class Model;  // model/model.h
class LoraAdapter;
class LoraStack;

class AdapterCache {
 public:
  // capacity 0: as many as there are sources. InputError for duplicate or empty names, a negative
  // capacity.
  AdapterCache(const Model& model, std::vector<AdapterSource> sources, int64_t capacity);
  ~AdapterCache();

  bool knows(const std::string& name) const { return sources_.count(name) > 0; }
  // Registers one more source (a server resolving an adapter a request names); the capacity stays
  // as constructed. InputError for an empty name or one already registered.
  void add_source(AdapterSource source);
  // The adapter, pinned once more; loaded first when absent (which may evict). nullptr when the
  // cache is full of pinned adapters: the caller waits for a retirement. Load errors propagate.
  std::shared_ptr<const LoraAdapter> acquire(const std::string& name);
  // Unpins one use of an acquired adapter.
  void release(const std::string& name);

  AdapterCacheStats stats() const;
  // Every adapter held now, least recently used first, and the course's stack of them (for the
  // gathered strategy), rebuilt only after a load or an eviction.
  std::vector<const LoraAdapter*> resident() const;
  std::shared_ptr<const LoraStack> stack();

 private:
  struct Entry {
    std::shared_ptr<const LoraAdapter> adapter;
    int64_t pins = 0;
  };
  const Model& model_;
  std::map<std::string, AdapterSource> sources_;
  int64_t capacity_;
  std::map<std::string, Entry> loaded_;
  std::list<std::string> lru_;  // least recently used first
  AdapterCacheStats stats_;
  std::shared_ptr<const LoraStack> stack_;
  bool stack_stale_ = true;
};

}  // namespace servelab
