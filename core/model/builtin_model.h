#pragma once
// Whether an engine runs the built-in model, the one the built-in adapters (lora/builtin_adapters.h)
// were trained on. Torch-free.

namespace servelab {

class Engine;

// The file default_model_path() names, however it was reached (a link, another spelling of the
// path; engine info's "builtin_model"); false for the demo model, any other file or folder, and when no
// built-in model exists.
bool is_builtin_model(const Engine& engine);

}  // namespace servelab
