"""The machine a benchmark ran on: every benchmark's JSON names the CPU, the best vector ISA our
kernels can use there (the engine's own dispatch rule: AVX-512 needs avx512f with AVX2, FMA and
F16C; AVX2 needs avx2, fma and f16c; else the portable loops), the core count and the load."""
import os
import subprocess


def machine():
    cpu, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and cpu == "unknown":
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    avx2 = {"avx2", "fma", "f16c"} <= flags
    isa = "avx512" if avx2 and "avx512f" in flags else "avx2" if avx2 else "generic"
    m = {"cpu": cpu, "isa": isa, "cpu_count": os.cpu_count(), "load_average_start": os.getloadavg()[0]}
    gpus = gpu_names()
    if gpus:
        m["gpus"] = gpus
    return m


def gpu_names():
    """The NVIDIA GPUs `nvidia-smi -L` lists (none where it is absent), for runs with --device cuda."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.startswith("GPU")]
