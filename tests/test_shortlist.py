"""The compiled shortlist scan (localspec/_shortlist.c) against numpy's, on rows with ties and float64 rows."""

import numpy as np
import pytest

from localspec import shortlist

needs_c = pytest.mark.skipif(shortlist.compiled() is None, reason="the C extension was not built")


def rows(seed=0):
    rng = np.random.default_rng(seed)
    yield rng.standard_normal(50_000).astype(np.float32)
    tied = np.round(rng.standard_normal(5_000), 1).astype(np.float32)  # many equal logits at every cut
    yield tied
    yield np.zeros(300, np.float32)
    yield rng.standard_normal(1_000)  # float64: scanned as float32, values handed back as given


@needs_c
@pytest.mark.parametrize("k", [1, 2, 40, 299, 300])
def test_top_k_in_c_equals_numpy_ties_included(k):
    for row in rows(k):
        k_here = min(k, row.shape[0])
        ids, vals = shortlist.top_k(row, k_here)
        ref_ids, ref_vals = shortlist.top_k(row, k_here, use_c=False)
        assert np.array_equal(ids, ref_ids) and np.array_equal(vals, ref_vals)
        assert np.all(np.diff(ids) > 0) and vals.dtype == row.dtype
        assert np.all(row[ids] == vals)
        assert vals.min() >= np.delete(row, ids).max(initial=-np.inf)  # nothing left out beats what was kept


def test_top_k_keeps_the_first_ids_of_equal_logits():
    row = np.array([1.0, 3.0, 2.0, 3.0, 2.0, 2.0], np.float32)
    for use_c in (True, False):
        assert shortlist.top_k(row, 3, use_c=use_c)[0].tolist() == [1, 2, 3]
        assert shortlist.top_k(row, 4, use_c=use_c)[0].tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("use_c", [pytest.param(True, marks=needs_c), False])
def test_above_is_a_superset_of_the_float64_test_and_grows_past_its_first_buffer(use_c):
    for row in rows(7):
        for gap in (np.log(0.05), np.log(0.5), -20.0):
            ids, vals = shortlist.above(row, gap, use_c=use_c)
            exact = np.flatnonzero(np.asarray(row, np.float64) >= float(np.max(row)) + gap)
            assert set(exact) <= set(ids.tolist()) and np.all(np.diff(ids) > 0)
            assert np.all(np.asarray(row)[ids] == vals)
            assert len(ids) <= len(exact) + np.sum(np.abs(np.asarray(row) - (np.max(row) + gap)) < 2e-3)
    many = shortlist.above(np.zeros(10_000, np.float32), -1.0, use_c=use_c)[0]  # more than any first buffer
    assert many.tolist() == list(range(10_000))
