#include "lora/adapter_cache.h"

#include <algorithm>

#include "lora/lora_adapter.h"
#include "lora/multi_lora.h"
#include "util/errors.h"

namespace servelab {

AdapterCache::AdapterCache(const Model& model, std::vector<AdapterSource> sources, int64_t capacity)
    : model_(model) {
  if (capacity < 0)
    throw InputError("adapter cache capacity must be 0 (all) or more, got " + std::to_string(capacity));
  for (AdapterSource& s : sources) {
    if (s.name.empty()) throw InputError("an adapter needs a name");
    const std::string name = s.name;
    if (!sources_.emplace(name, std::move(s)).second)
      throw InputError("two adapters are named '" + name + "'");
  }
  capacity_ = capacity == 0 ? static_cast<int64_t>(sources_.size()) : capacity;
  stats_.capacity = capacity_;
}

AdapterCache::~AdapterCache() = default;

void AdapterCache::add_source(AdapterSource source) {
  if (source.name.empty()) throw InputError("an adapter needs a name");
  const std::string name = source.name;
  if (!sources_.emplace(name, std::move(source)).second)
    throw InputError("an adapter named '" + name + "' is already registered");
}

std::shared_ptr<const LoraAdapter> AdapterCache::acquire(const std::string& name) {
  const auto src = sources_.find(name);
  if (src == sources_.end()) throw InputError("unknown adapter '" + name + "'");
  auto it = loaded_.find(name);
  if (it != loaded_.end()) {
    ++stats_.hits;
    lru_.remove(name);
    lru_.push_back(name);
    ++it->second.pins;
    return it->second.adapter;
  }
  if (static_cast<int64_t>(loaded_.size()) >= capacity_) {
    const auto victim =
        std::find_if(lru_.begin(), lru_.end(), [&](const std::string& n) { return loaded_.at(n).pins == 0; });
    if (victim == lru_.end()) return nullptr;
    stats_.resident_bytes -= loaded_.at(*victim).adapter->bytes();
    loaded_.erase(*victim);
    lru_.erase(victim);
    ++stats_.evictions;
    stack_stale_ = true;
  }
  std::shared_ptr<const LoraAdapter> adapter = load_adapter(src->second, model_);
  ++stats_.loads;
  stats_.resident_bytes += adapter->bytes();
  loaded_[name] = {adapter, 1};
  lru_.push_back(name);
  stack_stale_ = true;
  return adapter;
}

void AdapterCache::release(const std::string& name) {
  auto it = loaded_.find(name);
  if (it != loaded_.end() && it->second.pins > 0) --it->second.pins;
}

AdapterCacheStats AdapterCache::stats() const {
  AdapterCacheStats s = stats_;
  s.resident = static_cast<int64_t>(loaded_.size());
  return s;
}

std::vector<const LoraAdapter*> AdapterCache::resident() const {
  std::vector<const LoraAdapter*> out;
  for (const std::string& n : lru_) out.push_back(loaded_.at(n).adapter.get());
  return out;
}

std::shared_ptr<const LoraStack> AdapterCache::stack() {
  if (stack_stale_) {
    stack_ = std::make_shared<LoraStack>(resident());
    stack_stale_ = false;
  }
  return stack_;
}

}  // namespace servelab
