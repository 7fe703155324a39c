"""Tests of benches/machine.py, the CPU line the benches print (run by CI's pytest)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import machine  # noqa: E402

ZEN3 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx fma avx2 bmi2

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx fma avx2 bmi2
"""

SPR_FLAGS = "avx fma avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16"


def test_an_avx2_machine_reads_as_such(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(ZEN3)
    line = machine.cpu_line(environ={}, cpuinfo_path=str(info))
    assert line == ("CPU: AMD EPYC (family 25, model 1), 2 logical CPUs; AVX2+FMA, no AVX-512; "
                    "graphrw's kernels: avx2")


def test_avx512_needs_its_four_parts_and_graphrw_isa_lowers_the_level():
    full = set(SPR_FLAGS.split())
    assert machine.kernel_level(full, {}) == "avx512"
    assert machine.kernel_level(full - {"avx512dq"}, {}) == "avx2"
    assert machine.kernel_level(full, {"GRAPHRW_ISA": "avx2"}).startswith("avx2 (GRAPHRW_ISA=avx2")
    # A cap above the CPU's level changes nothing, as in graphrw.
    assert machine.kernel_level({"avx2", "fma"}, {"GRAPHRW_ISA": "avx512"}) == "avx2"
    assert machine.kernel_level({"avx2"}, {}) == "baseline"
    assert machine.describe_flags(full) == "AVX2+FMA, AVX-512 (BF16 BW DQ F VL)"


def test_a_missing_cpuinfo_still_gives_a_line(tmp_path):
    line = machine.cpu_line(environ={}, cpuinfo_path=str(tmp_path / "absent"))
    assert line.startswith("CPU: ") and "vector extensions unknown" in line
