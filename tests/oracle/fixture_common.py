"""What the fixture scripts for installed models (SmolLM2, Gemma 3 270M) share: writing a skip
reason where the model or the memory is missing, reading the memory left, and the stamp that says
whether fixtures already on disk came from this script, this model file and these library versions."""
import hashlib
import importlib
import os
import sys


def skip(script, out, why, outputs=("reference.json",)):
    """Removes stale outputs, writes why to skipped.txt (the C++ suite prints it) and exits 0."""
    os.makedirs(out, exist_ok=True)
    for f in outputs:
        if os.path.exists(os.path.join(out, f)):
            os.remove(os.path.join(out, f))
    with open(os.path.join(out, "skipped.txt"), "w") as f:
        f.write(why + "\n")
    print(f"{os.path.splitext(os.path.basename(script))[0]}: skipped: {why}")
    sys.exit(0)


def available_gib():
    """MemAvailable in GiB, or None where /proc/meminfo does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def stamp(script, model_path, modules=("torch", "transformers")):
    """The script's hash, the model file's identity and the versions of the modules that made the
    fixtures: when any of them changes, the fixtures are made again."""
    with open(os.path.abspath(script), "rb") as f:
        key = {"script_sha256": hashlib.sha256(f.read()).hexdigest()}
    st = os.stat(model_path)
    key.update({"model": os.path.realpath(model_path), "model_bytes": st.st_size, "model_mtime_ns": st.st_mtime_ns})
    for name in modules:
        key[name] = getattr(importlib.import_module(name), "__version__", "?")
    return key
