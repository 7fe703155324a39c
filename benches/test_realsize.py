"""Tests of benches/realsize.py's pure parts: shapes, geometric means and the table (run
by CI's pytest; the bench itself needs torch and never runs in CI)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import realsize  # noqa: E402


def test_shapes_are_batch_by_sequence():
    assert realsize.parse_shape("1x128") == (1, 128)
    assert realsize.parse_shape("4x64") == (4, 64)
    for bad in ["128", "0x8", "1x", "ax2", "1x-2"]:
        with pytest.raises(ValueError):
            realsize.parse_shape(bad)


def test_geomean_skips_missing_values():
    assert realsize.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert realsize.geomean([0.5, None, 2.0]) == pytest.approx(1.0)
    assert realsize.geomean([]) is None


def test_summary_is_the_median_ratio_b_over_a():
    o, g, med, q1, q3 = realsize.summary([10.0, 10.0, 20.0], [5.0, 10.0, 30.0])
    assert (o, g) == (10.0, 10.0)
    assert (med, q1, q3) == (pytest.approx(1.0), pytest.approx(0.75), pytest.approx(1.25))


def result(**extra):
    r = dict(model="llama", exporter="dynamo", shape="1x128", o_ms=[10.0, 10.0],
             g_ms=[9.0, 9.0], rss=(300.0, 400.0), check="abs 1e-05 rel 1e-04 ok")
    r.update(extra)
    return r


def test_a_row_gives_times_ratio_memory_and_check():
    fields = realsize.table_row(result()).split()
    assert fields[:3] == ["llama", "dynamo", "1x128"]
    assert [float(f) for f in fields[3:10]] == [9.0, 10.0, 0.9, 0.9, 0.9, 300.0, 400.0]
    assert fields[-1] == "ok"


def test_a_failed_row_says_why_and_stays_out_of_the_geomean():
    rows = [result(), dict(model="gemma-mqa", exporter="dynamo", shape="1x128",
                           error="graphrw exit 1: error: unsupported op")]
    assert realsize.table_row(rows[1]).endswith("error: unsupported op")
    assert realsize.geomean_line(rows) == "geomean graphrw / ort over 1 rows: 0.900"


def test_the_optimised_column_and_its_geomean():
    r = result(opt=([10.0, 10.0], [8.0, 8.0]))
    fields = realsize.table_row(r, with_opt=True).split()
    assert [float(f) for f in fields[10:14]] == [8.0, 0.8, 0.8, 0.8]
    line = realsize.geomean_line([r, result(opt_error="graphrw optimize failed")], True)
    assert line.endswith("ort on graphrw's optimised model / ort over 1 rows: 0.800")
    failed = result(opt_error="graphrw optimize failed")
    assert "graphrw optimize failed" in realsize.table_row(failed, True)


def test_the_error_line_is_the_last_that_names_an_error():
    out = "model: x\nerror: node 3: unsupported op Foo\n\n"
    assert realsize.last_error_line(out) == "error: node 3: unsupported op Foo"
    assert realsize.last_error_line("a\nb\n") == "b"
    assert realsize.last_error_line("") == "(no output)"


def test_the_check_takes_the_worst_output():
    out = ("  output 0 `logits`: max abs error 1.600e-5, max rel error 8.415e-2: ok\n"
           "  output 1 `present_key_0`: max abs error 5.007e-4, max rel error 4.980e-5: "
           "BEYOND TOLERANCE\n")
    assert realsize.check_line(out, 1) == "abs 5.0e-04 rel 8.4e-02 BEYOND TOLERANCE"
    assert realsize.check_line(out.splitlines()[0], 0) == "abs 1.6e-05 rel 8.4e-02 ok"
    assert realsize.check_line("", 101) == "? (exit 101)"
