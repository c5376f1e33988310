#include "util/data_paths.h"

#include <cstdlib>
#include <sstream>
#include <system_error>

namespace fs = std::filesystem;

namespace servelab {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The running executable's folder (Linux: /proc/self/exe); empty when it cannot be read.
fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

}  // namespace

std::vector<fs::path> data_dirs() {
  std::vector<fs::path> dirs;
  if (const fs::path exe = executable_dir(); !exe.empty())
    dirs.push_back((exe / ".." / "share" / "servelab").lexically_normal());
  // XDG Base Directory: relative entries are invalid and ignored.
  if (const std::string home = env("XDG_DATA_HOME"); fs::path(home).is_absolute())
    dirs.push_back(fs::path(home) / "servelab");
  else if (const std::string h = env("HOME"); !h.empty())
    dirs.push_back(fs::path(h) / ".local" / "share" / "servelab");
  std::string system = env("XDG_DATA_DIRS");
  if (system.empty()) system = "/usr/local/share:/usr/share";
  std::istringstream in(system);
  for (std::string entry; std::getline(in, entry, ':');)
    if (fs::path(entry).is_absolute()) dirs.push_back(fs::path(entry) / "servelab");
  return dirs;
}

fs::path find_data_dir(const std::vector<std::string>& relatives) {
  for (const fs::path& dir : data_dirs()) {
    bool all = true;
    for (const std::string& rel : relatives) {
      std::error_code ec;
      all = all && fs::exists(dir / rel, ec);
    }
    if (all) return dir;
  }
  return {};
}

std::string data_dirs_text() {
  std::string text;
  for (const fs::path& dir : data_dirs()) text += (text.empty() ? "" : ", ") + dir.string();
  return text;
}

bool build_tree_data_allowed() {
#if SERVELAB_BUILD_TREE_DATA
  return true;
#else
  return false;
#endif
}

}  // namespace servelab
