"""The machine a benchmark ran on: every benchmark's JSON names the CPU, the best vector ISA our
kernels can use there (the engine's own dispatch rule: AVX-512 needs avx512f with AVX2, FMA and
F16C; AVX2 needs avx2, fma and f16c; else the portable loops), the core count and the load."""
import os


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
    return {"cpu": cpu, "isa": isa, "cpu_count": os.cpu_count(), "load_average_start": os.getloadavg()[0]}
