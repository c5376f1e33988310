#include "model/model_catalog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "model/gguf_file.h"
#include "model/llama_config.h"  // read_llama_family_json: any config.json, read and checked
#include "model/safetensors_file.h"
#include "util/errors.h"
#include "util/hf_hub_cache.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace servelab {

namespace {

// How deep a folder of the user's is searched, and a snapshot for its .gguf files: deep enough for
// LM Studio's publisher/repo layout under a folder of folders, shallow enough that pointing at a
// home folder ends.
constexpr int kFolderDepth = 5;
constexpr int kSnapshotDepth = 2;

const char* const kOllamaModelLayer = "application/vnd.ollama.image.model";

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string flattened(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

// The scan under way on this thread (scan_models sets it for its duration): its control and how
// many models it has judged. The helpers below reach it here rather than through every signature.
struct ScanContext {
  const ScanControl& control;
  size_t found = 0;
  void check_cancel() const {
    if (control.cancel && control.cancel->load(std::memory_order_relaxed)) throw ScanCancelled();
  }
};
thread_local ScanContext* current_scan = nullptr;

// A directory's entries sorted by name (an unreadable directory has none).
std::vector<fs::directory_entry> sorted_entries(const fs::path& dir) {
  if (current_scan) current_scan->check_cancel();
  std::vector<fs::directory_entry> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec))
    out.push_back(*it);
  std::sort(out.begin(), out.end(),
            [](const fs::directory_entry& a, const fs::directory_entry& b) { return a.path() < b.path(); });
  return out;
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

// Present, or a symbolic link whose target is not (a dangling link is listed with its reason).
bool present(const fs::path& p) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(p, ec));
}

bool is_link(const fs::directory_entry& e) {
  std::error_code ec;
  return e.is_symlink(ec);
}

bool is_gguf_name(const fs::path& p) { return p.extension() == ".gguf"; }

// The sizes of the regular files under dir (symbolic links to files followed, as Hugging Face's
// snapshots link into blobs/; links to folders are not, so a loop cannot be entered).
std::uint64_t tree_size(const fs::path& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const std::uintmax_t n = fs::file_size(it->path(), size_ec);
      if (!size_ec) total += n;
    }
  }
  return total;
}

// llama.cpp's llama_ftype (general.file_type): the names its quantize tool gives a file.
std::string gguf_file_type_name(int64_t id) {
  static const std::map<int64_t, const char*> names = {
      {0, "F32"},     {1, "F16"},     {2, "Q4_0"},     {3, "Q4_1"},    {7, "Q8_0"},     {8, "Q5_0"},
      {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"},  {12, "Q3_K_M"}, {13, "Q3_K_L"},  {14, "Q4_K_S"},
      {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"},  {18, "Q6_K"},   {19, "IQ2_XXS"}, {20, "IQ2_XS"},
      {21, "Q2_K_S"}, {22, "IQ3_XS"}, {23, "IQ3_XXS"}, {24, "IQ1_S"},  {25, "IQ4_NL"},  {26, "IQ3_S"},
      {27, "IQ3_M"},  {28, "IQ2_S"},  {29, "IQ2_M"},   {30, "IQ4_XS"}, {31, "IQ1_M"},   {32, "BF16"},
      {36, "TQ1_0"},  {37, "TQ2_0"}};
  const auto it = names.find(id);
  return it == names.end() ? std::string() : it->second;
}

// The key with the largest count (the first by name on a tie); empty for none.
template <typename Count>
std::string most_common(const std::map<std::string, Count>& counts) {
  std::string best;
  Count top{};
  for (const auto& [name, n] : counts)
    if (best.empty() || n > top) best = name, top = n;
  return best;
}

// An entry's where and what; the rest is filled in by what reads it.
CatalogEntry entry_at(std::string name, ModelSource source, const std::string& root, const fs::path& path,
                      std::string format) {
  CatalogEntry e;
  e.name = std::move(name);
  e.source = source;
  e.root = root;
  e.path = path.string();
  e.format = std::move(format);
  return e;
}

// One more model found, for the scan's progress.
void counted(const CatalogEntry& e) {
  if (current_scan && current_scan->control.progress)
    current_scan->control.progress(++current_scan->found, e.path);
}

// Whether Engine::load would take the entry's path, and if not its one-line reason.
void judge(CatalogEntry& e) {
  if (current_scan) current_scan->check_cancel();
  try {
    check_loadable(e.path);
    e.loadable = true;
  } catch (const std::exception& ex) {
    e.loadable = false;
    e.why_not = flattened(ex.what());
  }
  counted(e);
}

CatalogEntry gguf_entry(std::string name, ModelSource source, const std::string& root, const fs::path& file) {
  CatalogEntry e = entry_at(std::move(name), source, root, file, "gguf");
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(file, ec);
  e.size_bytes = ec ? 0 : size;
  try {
    const GgufFile f = GgufFile::open(e.path);
    e.architecture = f.find_string("general.architecture").value_or("");
    if (const auto type = f.find_int("general.file_type")) e.quantization = gguf_file_type_name(*type);
    if (e.quantization.empty()) {
      std::map<std::string, int64_t> matrices;
      for (const GgufTensor& t : f.tensors())
        if (t.ne.size() >= 2) ++matrices[ggml_type_name(t.type)];
      e.quantization = most_common(matrices);
    }
  } catch (const std::exception&) {
    // The same reader fails again in judge(), which words why.
  }
  judge(e);
  return e;
}

// A folder's weights' dtype: a pre-quantized checkpoint's method and bits, else the dtype of most
// bytes in its (first) safetensors file as stored, else config.json's torch_dtype (dtype in newer
// transformers).
std::string folder_quantization(const fs::path& dir, const json& config) {
  if (config.contains("quantization_config") && config["quantization_config"].is_object()) {
    const json& q = config["quantization_config"];
    std::string s = q.contains("quant_method") && q["quant_method"].is_string()
                        ? q["quant_method"].get<std::string>()
                        : std::string("quantized");
    if (q.contains("bits") && q["bits"].is_number_integer())
      s += " " + std::to_string(q["bits"].get<int>()) + "-bit";
    return s;
  }
  fs::path weights = dir / "model.safetensors";
  if (!present(weights))
    for (const fs::directory_entry& f : sorted_entries(dir))
      if (f.path().extension() == ".safetensors") {
        weights = f.path();
        break;
      }
  try {
    const SafetensorsFile st = SafetensorsFile::open(weights.string());
    std::map<std::string, std::uint64_t> bytes;
    for (const StTensor& t : st.tensors()) bytes[dtype_name(t.dtype)] += t.nbytes;
    if (!bytes.empty()) return most_common(bytes);
  } catch (const std::exception&) {
    // No readable weights (judge() says so): the config's word is all there is.
  }
  static const std::map<std::string, std::string> torch_names = {
      {"float32", "F32"}, {"float16", "F16"}, {"bfloat16", "BF16"}, {"float64", "F64"}};
  for (const char* key : {"torch_dtype", "dtype"})
    if (config.contains(key) && config[key].is_string()) {
      const auto it = torch_names.find(config[key].get<std::string>());
      if (it != torch_names.end()) return it->second;
    }
  return {};
}

CatalogEntry folder_entry(std::string name, ModelSource source, const std::string& root,
                          const fs::path& dir) {
  CatalogEntry e = entry_at(std::move(name), source, root, dir, "safetensors");
  e.size_bytes = tree_size(dir);
  try {
    std::string file;
    const json config = read_llama_family_json(dir.string(), &file);
    if (config.is_object()) {
      if (config.contains("model_type") && config["model_type"].is_string())
        e.architecture = config["model_type"].get<std::string>();
      e.quantization = folder_quantization(dir, config);
    }
  } catch (const std::exception&) {
    // judge() words why an unreadable config.json does not load.
  }
  judge(e);
  return e;
}

// The models in one model's folder: itself when it holds a config.json, and every .gguf file in it
// (to kSnapshotDepth), named `name` and name/<file>. How many were added.
size_t add_model_dir(std::vector<CatalogEntry>& out, const std::string& name, ModelSource source,
                     const std::string& root, const fs::path& dir, int depth = 0) {
  size_t added = 0;
  if (depth == 0 && present(dir / "config.json")) {
    out.push_back(folder_entry(name, source, root, dir));
    ++added;
  }
  for (const fs::directory_entry& f : sorted_entries(dir)) {
    const std::string child = name + "/" + f.path().filename().string();
    if (is_gguf_name(f.path()) && !is_dir(f.path())) {
      out.push_back(gguf_entry(child, source, root, f.path()));
      ++added;
    } else if (depth + 1 < kSnapshotDepth && is_dir(f.path()) && !is_link(f)) {
      added += add_model_dir(out, child, source, root, f.path(), depth + 1);
    }
  }
  return added;
}

// One models--org--name folder of a Hugging Face cache: the snapshot refs/main names, else the
// newest. A repository with no usable snapshot is listed with the reason.
void add_hf_repo(std::vector<CatalogEntry>& out, ModelSource source, const std::string& root,
                 const fs::path& repo) {
  // models--org--name: "org/name".
  const std::string folder = repo.filename().string();
  std::string name;
  for (size_t i = std::string("models--").size(); i < folder.size(); ++i) {
    if (folder.compare(i, 2, "--") == 0) {
      name += '/';
      ++i;
    } else {
      name += folder[i];
    }
  }
  const auto unusable = [&](const std::string& why) {
    CatalogEntry e = entry_at(name, source, root, repo, "");
    e.size_bytes = tree_size(repo);
    e.why_not = why;
    counted(e);
    out.push_back(e);
  };
  fs::path snapshot;
  const fs::path ref = repo / "refs" / "main";
  if (present(ref)) {
    std::ifstream in(ref);
    std::string rev;
    std::getline(in, rev);
    rev.erase(rev.find_last_not_of(" \t\r\n") + 1);
    snapshot = repo / "snapshots" / rev;
    if (rev.empty() || !is_dir(snapshot))
      return unusable(ref.string() + " names snapshot \"" + rev + "\", which is not in " +
                      (repo / "snapshots").string());
  } else {
    fs::file_time_type newest{};
    for (const fs::directory_entry& s : sorted_entries(repo / "snapshots")) {
      std::error_code ec;
      const fs::file_time_type t = fs::last_write_time(s.path(), ec);
      if (is_dir(s.path()) && !ec && (snapshot.empty() || t > newest)) snapshot = s.path(), newest = t;
    }
    if (snapshot.empty()) return unusable(repo.string() + ": no snapshot (the download did not finish?)");
  }
  if (add_model_dir(out, name, source, root, snapshot) == 0)
    unusable(snapshot.string() + ": no config.json and no .gguf file (not a model ServeLab can load)");
}

void scan_hf_cache(std::vector<CatalogEntry>& out, ModelSource source, const std::string& root,
                   const fs::path& hub) {
  for (const fs::directory_entry& d : sorted_entries(hub))
    if (d.path().filename().string().rfind("models--", 0) == 0 && is_dir(d.path()))
      add_hf_repo(out, source, root, d.path());
}

// manifests/<registry>/<namespace>/<name>/<tag>: "name:tag" for Ollama's own library,
// "namespace/name:tag" for a user's, registry/namespace/name:tag for another registry.
std::string ollama_name(const fs::path& manifest) {
  const fs::path tag = manifest.filename(), model = manifest.parent_path().filename(),
                 ns = manifest.parent_path().parent_path().filename(),
                 registry = manifest.parent_path().parent_path().parent_path().filename();
  std::string name = model.string() + ":" + tag.string();
  if (registry != "registry.ollama.ai") return registry.string() + "/" + ns.string() + "/" + name;
  return ns == "library" ? name : ns.string() + "/" + name;
}

void add_ollama_manifest(std::vector<CatalogEntry>& out, const std::string& root, const fs::path& manifest) {
  CatalogEntry bad = entry_at(ollama_name(manifest), ModelSource::Ollama, root, manifest, "gguf");
  std::ifstream in(manifest, std::ios::binary);
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  const json* model = nullptr;
  const auto is = [](const json& o, const char* key, const std::string& value) {
    return o.is_object() && o.contains(key) && o[key].is_string() && (value.empty() || o[key] == value);
  };
  if (j.is_object() && j.contains("layers") && j["layers"].is_array())
    for (const json& layer : j["layers"])
      if (is(layer, "mediaType", kOllamaModelLayer) && is(layer, "digest", "")) model = &layer;
  if (!j.is_object()) {
    bad.why_not = manifest.string() + ": not a JSON manifest";
  } else if (!model) {
    bad.why_not = manifest.string() + ": no layer of mediaType " + kOllamaModelLayer;
  } else {
    std::string digest = (*model)["digest"].get<std::string>();
    const size_t colon = digest.find(':');
    if (colon != std::string::npos) digest[colon] = '-';
    const fs::path blob = fs::path(root) / "blobs" / digest;
    if (digest.find('/') != std::string::npos || colon == std::string::npos) {
      bad.why_not = manifest.string() + ": model layer digest \"" + (*model)["digest"].get<std::string>() +
                    "\" is not algorithm:hex";
    } else if (!present(blob)) {
      bad.why_not = blob.string() + ": not found (the model layer of " + manifest.string() + ")";
    } else {
      out.push_back(gguf_entry(bad.name, ModelSource::Ollama, root, blob));
      return;
    }
  }
  counted(bad);
  out.push_back(bad);
}

void scan_ollama(std::vector<CatalogEntry>& out, const std::string& root) {
  // Four levels: registry, namespace, name, tag.
  const std::function<void(const fs::path&, int)> walk = [&](const fs::path& dir, int level) {
    for (const fs::directory_entry& d : sorted_entries(dir)) {
      if (level == 3) {
        if (!is_dir(d.path())) add_ollama_manifest(out, root, d.path());
      } else if (is_dir(d.path()) && !is_link(d)) {
        walk(d.path(), level + 1);
      }
    }
  };
  walk(fs::path(root) / "manifests", 0);
}

// LM Studio: <publisher>/<repo>/ holding .gguf files (or an MLX/Hugging Face folder).
void scan_lm_studio(std::vector<CatalogEntry>& out, const std::string& root) {
  for (const fs::directory_entry& publisher : sorted_entries(root))
    if (is_dir(publisher.path()))
      for (const fs::directory_entry& repo : sorted_entries(publisher.path()))
        if (is_dir(repo.path()))
          add_model_dir(out, publisher.path().filename().string() + "/" + repo.path().filename().string(),
                        ModelSource::LmStudio, root, repo.path());
}

// A folder of the user's, to kFolderDepth: model folders (not searched further), Hugging Face
// cache repositories and .gguf files. Every folder is entered once (by its canonical path), so a
// symbolic link back up the tree ends.
void scan_folder(std::vector<CatalogEntry>& out, const std::string& root, const fs::path& dir,
                 std::set<fs::path>& seen, int depth) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(dir, ec);
  if (ec || !seen.insert(canonical).second) return;
  const fs::path base(root);
  const auto name_of = [&](const fs::path& p) {
    const fs::path rel = p.lexically_relative(base);
    return rel.empty() || rel == "." ? base.filename().string() : rel.string();
  };
  if (present(dir / "config.json")) {
    out.push_back(folder_entry(name_of(dir), ModelSource::Folder, root, dir));
    return;
  }
  for (const fs::directory_entry& f : sorted_entries(dir)) {
    const std::string file = f.path().filename().string();
    if (is_gguf_name(f.path()) && !is_dir(f.path())) {
      out.push_back(gguf_entry(name_of(f.path()), ModelSource::Folder, root, f.path()));
    } else if (file.rfind("models--", 0) == 0 && is_dir(f.path() / "snapshots")) {
      add_hf_repo(out, ModelSource::Folder, root, f.path());
    } else if (depth < kFolderDepth && is_dir(f.path())) {
      scan_folder(out, root, f.path(), seen, depth + 1);
    }
  }
}

}  // namespace

const char* model_source_name(ModelSource source) {
  switch (source) {
    case ModelSource::HfCache:
      return "hf-cache";
    case ModelSource::LmStudio:
      return "lm-studio";
    case ModelSource::Ollama:
      return "ollama";
    case ModelSource::Folder:
      return "folder";
  }
  return "folder";
}

json CatalogEntry::to_json() const {
  return {{"name", name},
          {"source", model_source_name(source)},
          {"root", root},
          {"path", path},
          {"architecture", architecture},
          {"format", format},
          {"quantization", quantization},
          {"size_bytes", size_bytes},
          {"loadable", loadable},
          {"why_not", why_not}};
}

CatalogRoots default_catalog_roots() {
  CatalogRoots r;
  const std::string home = env("HOME");
  r.hf_cache = hf_hub_cache_dir();
  if (!home.empty()) r.lm_studio = {home + "/.lmstudio/models", home + "/.cache/lm-studio/models"};
  if (const std::string ollama = env("OLLAMA_MODELS"); !ollama.empty())
    r.ollama = ollama;
  else if (!home.empty())
    r.ollama = home + "/.ollama/models";
  return r;
}

std::vector<CatalogEntry> scan_models(const CatalogRoots& roots, const ScanControl& control) {
  for (const std::string& f : roots.folders) {
    if (f.empty()) throw InputError("a folder to search for models is empty (give its path)");
    if (!present(f)) throw InputError("model folder " + f + " does not exist");
    if (!is_dir(f)) throw InputError(f + " is not a folder (give a folder to search for models)");
  }
  ScanContext context{control};
  current_scan = &context;
  struct Reset {
    ~Reset() { current_scan = nullptr; }
  } reset;
  std::vector<CatalogEntry> out;
  // Each root's entries sorted by name, the roots in order.
  const auto scanned = [&](ModelSource source, const std::string& root, const std::function<void()>& scan) {
    const size_t from = out.size();
    try {
      scan();
    } catch (const ScanCancelled&) {
      throw;
    } catch (const std::exception& e) {
      // Each model's problems are its entry's; what escapes them (a folder vanishing under the
      // search) ends this root's search with a line saying so, and the other roots still run.
      CatalogEntry stop = entry_at(root, source, root, root, "");
      stop.why_not = root + ": the search stopped: " + flattened(e.what());
      out.push_back(stop);
    }
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(from), out.end(),
                     [](const CatalogEntry& a, const CatalogEntry& b) { return a.name < b.name; });
  };
  if (!roots.hf_cache.empty() && is_dir(roots.hf_cache))
    scanned(ModelSource::HfCache, roots.hf_cache,
            [&] { scan_hf_cache(out, ModelSource::HfCache, roots.hf_cache, roots.hf_cache); });
  for (const std::string& r : roots.lm_studio)
    if (is_dir(r)) scanned(ModelSource::LmStudio, r, [&] { scan_lm_studio(out, r); });
  if (!roots.ollama.empty() && is_dir(roots.ollama))
    scanned(ModelSource::Ollama, roots.ollama, [&] { scan_ollama(out, roots.ollama); });
  for (const std::string& given : roots.folders) {
    // "models/" and "models" are one folder, named "models".
    fs::path folder = fs::path(given).lexically_normal();
    if (!folder.has_filename() && folder.has_parent_path() && folder != folder.root_path())
      folder = folder.parent_path();
    const std::string f = folder.string();
    std::set<fs::path> seen;
    scanned(ModelSource::Folder, f, [&] { scan_folder(out, f, f, seen, 0); });
  }
  return out;
}

std::string human_size(std::uint64_t bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1000 && u + 1 < std::size(units)) v /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 || v >= 100 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string catalog_table(const std::vector<CatalogEntry>& entries) {
  if (entries.empty()) return "no models found\n";
  const auto cells = [](const CatalogEntry& e) -> std::vector<std::string> {
    const auto or_unknown = [](const std::string& s) { return s.empty() ? std::string("?") : s; };
    return {e.name,
            model_source_name(e.source),
            or_unknown(e.architecture),
            or_unknown(e.format),
            or_unknown(e.quantization),
            human_size(e.size_bytes),
            e.loadable ? "yes" : "no"};
  };
  const std::vector<std::string> head = {"name",  "source", "architecture", "format",
                                         "quant", "size",   "loads"};
  std::vector<size_t> width(head.size());
  for (size_t c = 0; c < head.size(); ++c) width[c] = head[c].size();
  for (const CatalogEntry& e : entries) {
    const std::vector<std::string> row = cells(e);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  const auto line = [&](const std::vector<std::string>& row) {
    std::string s;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      s += c == 5 ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");  // sizes right-aligned
      if (c + 1 < row.size()) s += "  ";
    }
    return s + "\n";
  };
  std::string out = line(head);
  for (const CatalogEntry& e : entries) {
    out += line(cells(e));
    if (!e.loadable) out += "    why not: " + e.why_not + "\n";
  }
  return out;
}

}  // namespace servelab
