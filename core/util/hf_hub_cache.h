#pragma once
// Where the Hugging Face Hub keeps downloaded repositories on this machine, found the way
// huggingface_hub finds it, for the Models dialog's scan and the server's adapter_source "hub".
#include <string>

namespace servelab {

// $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub; empty when none of those variables is set.
std::string hf_hub_cache_dir();

// The folder of a Hub repository in that cache: models--<org>--<name>/snapshots/<revision>, the
// revision refs/main names (else the newest snapshot). Empty when absent; *searched says where it
// looked.
std::string hf_cache_snapshot(const std::string& repo_id, std::string* searched = nullptr);

}  // namespace servelab
