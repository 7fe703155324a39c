"""Tests of benches/paired.py, the loop that runs two models in turn (run by CI's pytest)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import paired  # noqa: E402

# A stand-in for `graphrw run --paced`: `ready`, then one `run N T ms` per stdin line,
# T taken from argv in turn; it stops at the end of stdin or after the last time.
FAKE_CHILD = r"""
import sys
times = [float(t) for t in sys.argv[1:]]
print("planned", flush=True)
print("ready", flush=True)
for n, t in enumerate(times):
    if not sys.stdin.readline():
        break
    print(f"run {n + 1} {t:.3f} ms", flush=True)
print("done")
"""


def fake(tmp_path, times):
    script = tmp_path / "child.py"
    script.write_text(FAKE_CHILD)
    return paired.PacedChild([sys.executable, str(script)] + [str(t) for t in times])


def test_quantiles_interpolate_between_the_nearest_values():
    assert paired.quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert paired.quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert paired.quantile([1.0, 2.0, 3.0, 4.0], 0.25) == pytest.approx(1.75)
    assert paired.quantile([5.0], 0.75) == 5.0


def test_a_row_gives_the_median_ratio_and_counts_the_pairs_b_won():
    a = [10.0, 10.0, 10.0, 10.0]
    b = [9.0, 11.0, 8.0, 9.5]
    line = paired.row("m", a, b, (100.0, 50.0))
    fields = line.split()
    assert fields[0] == "m"
    assert fields[1] == "4"
    assert float(fields[2]) == pytest.approx(0.925, abs=5e-4)  # median of .8 .9 .95 1.1
    assert fields[5] == "3"  # B took less time in three pairs
    assert [float(f) for f in fields[6:]] == [10.0, 9.2, 100.0, 50.0]


def test_env_with_adds_assignments_and_refuses_a_bare_name():
    env = paired.env_with(["GRAPHRW_ISA=avx2", "X=a=b"])
    assert env["GRAPHRW_ISA"] == "avx2"
    assert env["X"] == "a=b"
    assert env["PATH"] == os.environ["PATH"]
    with pytest.raises(SystemExit):
        paired.env_with(["GRAPHRW_ISA"])


def test_alternate_drops_the_warm_up_pair_and_keeps_each_sides_times(tmp_path):
    a = fake(tmp_path, [99.0, 1.0, 2.0, 3.0])
    b = fake(tmp_path, [77.0, 10.0, 20.0, 30.0])
    a_ms, b_ms = paired.alternate(a, b, 3, gap=0.0)
    assert a_ms == [1.0, 2.0, 3.0]
    assert b_ms == [10.0, 20.0, 30.0]
    out, rc, rss = a.finish()
    assert rc == 0
    assert "done" in out
    assert rss > 0


def test_a_child_that_ends_before_its_runs_stops_the_driver(tmp_path):
    a = fake(tmp_path, [1.0])
    a.run_once()
    with pytest.raises(SystemExit):
        a.run_once()
