"""The machine a benchmark ran on: every benchmark's JSON names the CPU, the best vector ISA our
kernels can use there (the engine's own dispatch rule: AVX-512 needs avx512f with AVX2, FMA and
F16C; AVX2 needs avx2, fma and f16c; else the portable loops), the core count and the load.

`engine_isa()` is the ISA `servelab-cli info` reports as `cpu.isa` when nothing forces another:
the best one, or `SERVELAB_ISA` where the environment sets one this CPU can run (the rule of
core/util/cpu_features.cpp). `read_bandwidth()` measures what this machine reads per second (the
read floor a decode step is compared with). `results_meta.py` builds the common block of every
result file from these."""
import json
import os
import subprocess
import sys

ISAS = ("avx512", "avx2", "generic")


def cpu_info():
    """(model name, flags) from /proc/cpuinfo; ("unknown", set()) where it cannot be read."""
    cpu, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and cpu == "unknown":
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return cpu, flags


def best_isa(flags):
    """The best ISA our kernels have for these CPU flags (cpu_supports() in core/util/cpu_features.cpp)."""
    avx2 = {"avx2", "fma", "f16c"} <= flags
    return "avx512" if avx2 and "avx512f" in flags else "avx2" if avx2 else "generic"


def engine_isa(flags=None, env=None):
    """(isa, source): what the engine dispatches to. `source` is "detected" or "SERVELAB_ISA"; an
    SERVELAB_ISA the CPU cannot run (the engine refuses it) or that names no ISA gives
    (best, "detected; SERVELAB_ISA=X refused")."""
    if flags is None:
        flags = cpu_info()[1]
    env = os.environ if env is None else env
    best = best_isa(flags)
    forced = env.get("SERVELAB_ISA", "")
    if not forced:
        return best, "detected"
    if forced in ISAS and ISAS.index(forced) >= ISAS.index(best):
        return forced, "SERVELAB_ISA"
    return best, f"detected; SERVELAB_ISA={forced} refused"


def machine():
    cpu, flags = cpu_info()
    m = {"cpu": cpu, "isa": best_isa(flags), "cpu_count": os.cpu_count(), "load_average_start": os.getloadavg()[0]}
    gpus = gpu_names()
    if gpus:
        m["gpus"] = gpus
    return m


def memory_gib():
    """MemTotal from /proc/meminfo in GiB (one decimal), None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / (1024 * 1024), 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def description(cpu=None, flags=None):
    """A description of the machine that names no host: CPU, cores, memory, VM or not, GPUs."""
    if cpu is None or flags is None:
        cpu, flags = cpu_info()
    parts = [f"{os.cpu_count()} x {cpu}"]
    mem = memory_gib()
    if mem is not None:
        parts.append(f"{mem} GiB")
    parts.append("virtual machine" if "hypervisor" in flags else "bare metal or undetected hypervisor")
    gpus = gpu_names()
    if gpus:
        parts.append(", ".join(gpus))
    return ", ".join(parts)


def gpu_names():
    """The NVIDIA GPUs `nvidia-smi -L` lists (none where it is absent), for runs with --device cuda."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.startswith("GPU")]


# This machine's read bandwidth with a benchmark's threads, in a child process (libtorch's own
# thread pool, as the engine's): libtorch's sum over N MiB of fp32 (reads only) and its copy_ for
# reference (read + write bytes), median of `repeats` timed runs after one warm-up.
READ_PROBE = r"""
import json, statistics, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
x = torch.ones(int(sys.argv[2]) * 1024 * 1024 // 4)
y = torch.empty_like(x)
x.sum(), y.copy_(x)
read, copy = [], []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter(); x.sum(); read.append(x.numel() * 4 / (time.perf_counter() - t) / 1e9)
    t = time.perf_counter(); y.copy_(x); copy.append(2 * x.numel() * 4 / (time.perf_counter() - t) / 1e9)
print(json.dumps({"read_gb_s": statistics.median(read), "copy_gb_s": statistics.median(copy)}))
"""


def read_bandwidth(threads, mib=512, repeats=5, python=None):
    """{"read_gb_s", "copy_gb_s"} measured now with `threads` threads over `mib` MiB (1e9 bytes per
    GB). Needs torch in `python` (default: this interpreter); raises CalledProcessError otherwise."""
    out = subprocess.run([python or sys.executable, "-c", READ_PROBE, str(threads), str(mib), str(repeats)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)
