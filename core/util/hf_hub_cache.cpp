// The Hugging Face Hub's cache on this machine. See hf_hub_cache.h.
#include "util/hf_hub_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace servelab {

namespace fs = std::filesystem;

namespace {
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : "";
}
}  // namespace

std::string hf_hub_cache_dir() {
  if (!env("HF_HUB_CACHE").empty()) return env("HF_HUB_CACHE");
  if (!env("HF_HOME").empty()) return (fs::path(env("HF_HOME")) / "hub").string();
  if (!env("XDG_CACHE_HOME").empty())
    return (fs::path(env("XDG_CACHE_HOME")) / "huggingface" / "hub").string();
  if (!env("HOME").empty()) return (fs::path(env("HOME")) / ".cache" / "huggingface" / "hub").string();
  return "";
}

std::string hf_cache_snapshot(const std::string& repo_id, std::string* searched) {
  const std::string dir = hf_hub_cache_dir();
  if (dir.empty()) {
    if (searched) *searched = "$HF_HUB_CACHE, $HF_HOME, $XDG_CACHE_HOME and $HOME are all unset";
    return "";
  }
  const fs::path hub = dir;
  std::string folder = "models--" + repo_id;
  for (size_t at = folder.find('/'); at != std::string::npos; at = folder.find('/', at + 2))
    folder.replace(at, 1, "--");
  const fs::path repo = hub / folder;
  if (searched) *searched = repo.string();
  std::error_code ec;
  if (repo_id.empty() || repo_id.find("..") != std::string::npos || !fs::is_directory(repo / "snapshots", ec))
    return "";
  std::ifstream ref(repo / "refs" / "main");
  std::string revision;
  if (ref && std::getline(ref, revision) && fs::is_directory(repo / "snapshots" / revision, ec))
    return (repo / "snapshots" / revision).string();
  fs::path newest;
  fs::file_time_type newest_time{};
  for (const auto& d : fs::directory_iterator(repo / "snapshots", ec)) {
    if (!d.is_directory(ec)) continue;
    const auto t = d.last_write_time(ec);
    if (newest.empty() || t > newest_time) {
      newest = d.path();
      newest_time = t;
    }
  }
  return newest.string();
}

}  // namespace servelab
