/*
 * A row's sampling candidates, taken in one pass over the vocabulary: the k largest logits (top-k), or
 * every logit within `gap` of the largest (min-p's survivors: p >= min_p * p_max is z >= z_max + log(min_p)).
 *
 * numpy needs a partition of a copy of the whole row for the same (1.1 ms for a 152k vocabulary on a
 * 2-core EPYC, benchmarks/sampling_cost.py). Here the row is read in chunks, each first tested as a whole
 * against the current bound (a loop the compiler turns into vector compares): almost every chunk holds
 * nothing that passes, and only the rare chunk that does is walked entry by entry. The candidates come back
 * in ascending id order, as sampling.py lists them, so that the compiled and the numpy shortlist give the
 * sampler the same input.
 *
 * Loaded with ctypes; the tiny module init below only lets setuptools build and locate it.
 */
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#include "export.h"

typedef struct {
    float val;
    int32_t id;
} Entry;

/* a min-heap on val (ties: the larger id is the smaller entry, so the first of equal logits is kept) */
static int below(Entry a, Entry b) { return a.val < b.val || (a.val == b.val && a.id > b.id); }

static void sift_down(Entry *heap, int32_t n, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && below(heap[l], heap[m])) m = l;
        if (r < n && below(heap[r], heap[m])) m = r;
        if (m == i) return;
        Entry t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
}

#define CHUNK 64

/* whether any of x[0..n) is >= t (no early exit, so that it compiles to vector compares) */
static int any_at_least(const float *x, int32_t n, float t) {
    int any = 0;
    for (int32_t j = 0; j < n; j++) any |= x[j] >= t;
    return any;
}

static int by_id(const void *a, const void *b) {
    int32_t x = ((const Entry *)a)->id, y = ((const Entry *)b)->id;
    return (x > y) - (x < y);
}

/* The k largest of row[0..n) (1 <= k <= n) into ids/vals, ascending id; returns k. `heap` holds k entries. */
API int32_t sl_top_k(const float *row, int32_t n, int32_t k, int32_t *ids, float *vals) {
    if (k < 1 || k > n) return 0;
    Entry *heap = malloc(sizeof(Entry) * (size_t)k);
    if (!heap) return -1;
    for (int32_t i = 0; i < k; i++) heap[i] = (Entry){row[i], i};
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(heap, k, i);
    float floor = heap[0].val;
    for (int32_t start = k; start < n; start += CHUNK) {
        int32_t end = start + CHUNK < n ? start + CHUNK : n;
        if (!any_at_least(row + start, end - start, floor)) continue;
        for (int32_t i = start; i < end; i++) {
            float v = row[i];
            if (v > floor) { /* equal values keep the earlier id, as the heap already holds it */
                heap[0] = (Entry){v, i};
                sift_down(heap, k, 0);
                floor = heap[0].val;
            }
        }
    }
    qsort(heap, (size_t)k, sizeof(Entry), by_id);
    for (int32_t i = 0; i < k; i++) {
        ids[i] = heap[i].id;
        vals[i] = heap[i].val;
    }
    free(heap);
    return k;
}

/* Every entry of row[0..n) with row[i] >= max(row) + gap (gap <= 0), ascending id, at most `cap` of them;
 * returns how many there are (more than cap: only the first cap were written, ask again with more room). */
API int32_t sl_above(const float *row, int32_t n, float gap, int32_t *ids, float *vals, int32_t cap) {
    float best = row[0];
    for (int32_t start = 0; start < n; start += CHUNK) {
        int32_t end = start + CHUNK < n ? start + CHUNK : n;
        if (!any_at_least(row + start, end - start, best)) continue;
        for (int32_t i = start; i < end; i++)
            if (row[i] > best) best = row[i];
    }
    float floor = best + gap;
    int32_t m = 0;
    for (int32_t start = 0; start < n; start += CHUNK) {
        int32_t end = start + CHUNK < n ? start + CHUNK : n;
        if (!any_at_least(row + start, end - start, floor)) continue;
        for (int32_t i = start; i < end; i++) {
            if (row[i] >= floor) {
                if (m < cap) {
                    ids[m] = i;
                    vals[m] = row[i];
                }
                m++;
            }
        }
    }
    return m;
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_shortlist",
                                    "compiled sampling shortlists (used through ctypes)", -1, NULL};
PyMODINIT_FUNC PyInit__shortlist(void) { return PyModule_Create(&module); }
