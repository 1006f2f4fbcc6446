"""Which weight layout llama.cpp loads: repacked by default, unrepacked for --exact or where the measured
table says the file's own layout wins on this kind of CPU."""

import json

from support.benchmarks import benchmark_module

from localspec.backends.llama_cpp.layout import TABLE, cpu_kind, prefill_unrepacked, repack

TABLE_ROWS = {"avx2": {"Q4_K_M": {"layout": "unrepacked"}, "Q4_0": {"layout": "repacked"}}}


def test_repacked_by_default_unrepacked_for_exact_or_where_the_table_says_so():
    assert repack("Q4_K_M", exact=False, kind="avx2", table=TABLE_ROWS) == (
        False,
        "weights unrepacked: faster for Q4_K_M on avx2 CPUs (benchmarks/kernel_costs.py)",
    )
    assert repack("Q4_0", exact=False, kind="avx2", table=TABLE_ROWS) == (True, "")
    assert repack("Q4_K_M", exact=False, kind="avx512", table=TABLE_ROWS) == (True, "")  # another CPU kind
    assert repack(None, exact=False, kind="avx2", table=TABLE_ROWS) == (True, "")  # no file type: llama.cpp's way
    assert repack("Q4_0", exact=True, kind="avx2", table=TABLE_ROWS) == (False, "")  # --exact: always unrepacked


def test_cpu_kind_is_the_widest_vector_extension():
    assert cpu_kind("processor : 0\nflags\t\t: fpu sse avx avx2 fma\n") == "avx2"
    assert cpu_kind("flags : fpu avx2 avx512f avx512bw\n") == "avx512"


def test_the_shipped_table_holds_a_verdict_per_measured_quantization():
    table = json.loads(TABLE.read_text())["layout"]
    for rows in table.values():
        for quant, row in rows.items():
            assert row["layout"] in ("repacked", "unrepacked"), quant
            turns = row["turn_ms"]
            wins = all(turns["unrepacked"][a] < turns["repacked"][a] for a in turns["repacked"])
            assert (row["layout"] == "unrepacked") == wins  # the verdict is what its turns say


def test_prompts_prefill_unrepacked_only_where_the_table_says_so():
    rows = {"avx512": {"Q4_K_M": {"layout": "repacked", "prefill": "unrepacked"}, "Q4_0": {"layout": "repacked"}}}
    assert prefill_unrepacked("Q4_K_M", kind="avx512", table=rows)
    assert not prefill_unrepacked("Q4_0", kind="avx512", table=rows)  # no prefill verdict: not measured to pay
    assert not prefill_unrepacked("Q4_K_M", kind="avx2", table=rows)  # another CPU kind
    assert not prefill_unrepacked(None, kind="avx512", table=rows)


def test_the_shipped_prefill_verdicts_are_what_their_timings_say():
    with benchmark_module("kernel_costs") as kernel_costs:
        win = kernel_costs.PREFILL_WIN
    for rows in json.loads(TABLE.read_text())["layout"].values():
        for quant, row in rows.items():
            if "prefill" in row:
                ms = row["prefill_ms"]
                assert (row["prefill"] == "unrepacked") == (ms["unrepacked"] < win * ms["repacked"]), quant
