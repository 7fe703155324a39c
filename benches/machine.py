"""The machine a bench runs on, as one line to print above its figures.

Every speed figure is reported with the CPU and its vector extensions: graphrw picks its
kernels (AVX-512 or AVX2+FMA, else portable loops) at run time, so the same bench on two
machines measures different code. The benches print `cpu_line()` first:

    CPU: AMD EPYC (family 25, model 1), 2 logical CPUs; AVX2+FMA, no AVX-512; graphrw's kernels: avx2

The kernels' level is the highest the CPU runs (as `graphrw_kernels::cpu::Isa::best`
decides: AVX-512 needs F, VL, BW and DQ; AVX2 needs FMA too), lowered by `GRAPHRW_ISA`
where it is set. `python3 benches/machine.py` prints the line alone.
"""

import os
import platform

# graphrw's instruction-set levels, lowest first, as `GRAPHRW_ISA` names them.
LEVELS = ["baseline", "avx2", "avx512"]


def cpu_flags(cpuinfo_text):
    """(model name, family, model, logical CPUs, set of flags) from /proc/cpuinfo's text."""
    name, family, model, flags, cpus = None, None, None, set(), 0
    for line in cpuinfo_text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            cpus += 1
        elif key == "model name" and name is None:
            name = value
        elif key == "cpu family" and family is None:
            family = value
        elif key == "model" and model is None:
            model = value
        elif key == "flags" and not flags:
            flags = set(value.split())
    return name, family, model, cpus, flags


def kernel_level(flags, environ):
    """The level graphrw's kernels run at: the CPU's best, capped by GRAPHRW_ISA."""
    if {"avx2", "fma"} <= flags:
        best = "avx512" if {"avx512f", "avx512vl", "avx512bw", "avx512dq"} <= flags else "avx2"
    else:
        best = "baseline"
    cap = environ.get("GRAPHRW_ISA", "").strip().lower()
    if cap in LEVELS and LEVELS.index(cap) < LEVELS.index(best):
        return f"{cap} (GRAPHRW_ISA={cap}; the CPU runs {best})"
    return best


def describe_flags(flags):
    """The vector extensions that decide graphrw's kernels, in words."""
    if not flags:
        return "vector extensions unknown"
    avx512 = sorted(f[len("avx512"):].lstrip("_").upper() for f in flags if f.startswith("avx512"))
    base = "AVX2+FMA" if {"avx2", "fma"} <= flags else "no AVX2+FMA"
    if avx512:
        return f"{base}, AVX-512 ({' '.join(avx512)})"
    return f"{base}, no AVX-512"


def cpu_line(environ=None, cpuinfo_path="/proc/cpuinfo"):
    """One line naming the CPU, its vector extensions and graphrw's kernel level."""
    environ = os.environ if environ is None else environ
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            name, family, model, cpus, flags = cpu_flags(f.read())
    except OSError:
        name, family, model, cpus, flags = None, None, None, 0, set()
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    ident = f" (family {family}, model {model})" if family and model else ""
    cpus = cpus or os.cpu_count() or 0
    return (f"CPU: {name}{ident}, {cpus} logical CPUs; {describe_flags(flags)}; "
            f"graphrw's kernels: {kernel_level(flags, environ) if flags else 'unknown'}")


if __name__ == "__main__":
    print(cpu_line())
