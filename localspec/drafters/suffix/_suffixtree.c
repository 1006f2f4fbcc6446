/*
 * A depth-limited suffix trie over token sequences, with occurrence counts, for Suffix Decoding.
 *
 * The corpus is an append-only array of tokens; sequences are separated by SEP. Node v stands for a
 * string s (its path from the root, |s| <= max_depth); v.count is the number of occurrences of s in the
 * corpus and v.pos is where the token after the newest occurrence lies.
 *
 * Lazy leaves keep memory low: a node with count 1 has no children; its one occurrence continues in the
 * corpus at v.pos. A node with count >= 2 has a child for every continuation of its occurrences (up to
 * max_depth). When a second occurrence reaches a lazy leaf, the first one is pushed one level down.
 * Counts are exact at every depth up to max_depth; nodes at max_depth have no children (st_draft
 * re-matches there).
 *
 * Appending a token extends the suffixes that start in the last max_depth positions. Each suffix keeps
 * the deepest node known on its path ("active"), so an append walks O(1) levels per suffix on average.
 * Nodes are never freed one by one: eviction rebuilds the trie from the sequences kept (Python side).
 *
 * Loaded with ctypes; the tiny module init below only lets setuptools build and locate it.
 */
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SEP (-1)
#define NONE (-1)

#include "export.h"

typedef struct {
    int32_t token, count, child, sibling, pos;
} Node;

typedef struct {
    int32_t node, depth;
} Active;

typedef struct {
    int32_t max_depth;
    Node *nodes;
    int64_t n_nodes, cap_nodes;
    int32_t *corpus;
    int64_t n_corpus, cap_corpus;
    int64_t seq_start;      /* start of the open sequence */
    int32_t *root_child;    /* root's children indexed by token */
    int64_t n_root_child;
    Active *active;         /* ring buffer, indexed by suffix start % max_depth */
} Tree;

static int grow(void **buf, int64_t *cap, int64_t need, size_t item) {
    if (need <= *cap) return 0;
    int64_t n = *cap ? *cap : 1024;
    while (n < need) n *= 2;
    void *p = realloc(*buf, (size_t)n * item);
    if (!p) return -1;
    *buf = p;
    *cap = n;
    return 0;
}

API Tree *st_new(int32_t max_depth) {
    Tree *t = calloc(1, sizeof(Tree));
    if (!t) return NULL;
    t->max_depth = max_depth;
    t->active = calloc((size_t)max_depth, sizeof(Active));
    if (!t->active || grow((void **)&t->nodes, &t->cap_nodes, 1, sizeof(Node))) {
        free(t->active);
        free(t);
        return NULL;
    }
    t->nodes[0] = (Node){SEP, 0, NONE, NONE, 0}; /* the root */
    t->n_nodes = 1;
    return t;
}

API void st_free(Tree *t) {
    if (!t) return;
    free(t->nodes);
    free(t->corpus);
    free(t->root_child);
    free(t->active);
    free(t);
}

static int32_t child_of(const Tree *t, int32_t v, int32_t token) {
    if (v == 0) return token < t->n_root_child ? t->root_child[token] : NONE;
    for (int32_t c = t->nodes[v].child; c != NONE; c = t->nodes[c].sibling)
        if (t->nodes[c].token == token) return c;
    return NONE;
}

static int32_t new_child(Tree *t, int32_t v, int32_t token, int32_t pos) {
    if (grow((void **)&t->nodes, &t->cap_nodes, t->n_nodes + 1, sizeof(Node))) return NONE;
    int32_t c = (int32_t)t->n_nodes++;
    t->nodes[c] = (Node){token, 1, NONE, NONE, pos};
    if (v == 0) {
        int64_t old = t->n_root_child;
        if (token >= old) {
            int64_t cap = old;
            if (grow((void **)&t->root_child, &cap, (int64_t)token + 1, sizeof(int32_t))) return NONE;
            for (int64_t i = old; i < cap; i++) t->root_child[i] = NONE;
            t->n_root_child = cap;
        }
        t->root_child[token] = c;
    }
    t->nodes[c].sibling = t->nodes[v].child;
    t->nodes[v].child = c;
    return c;
}

/* One more occurrence of (string of v) + token, continuing at pos. v is the root or has count >= 2. */
static int add_occurrence(Tree *t, int32_t v, int32_t depth, int32_t token, int32_t pos) {
    int32_t c = child_of(t, v, token);
    if (c == NONE) return new_child(t, v, token, pos) == NONE ? -1 : 0;
    Node *n = &t->nodes[c];
    if (n->count == 1 && n->child == NONE && depth + 1 < t->max_depth) {
        /* c was a lazy leaf: push its one earlier occurrence down a level before counting this one */
        int32_t old = n->pos;
        if (old < t->n_corpus && t->corpus[old] != SEP) {
            if (new_child(t, c, t->corpus[old], old + 1) == NONE) return -1;
            n = &t->nodes[c];
        }
    }
    n->count++;
    n->pos = pos;
    return 0;
}

/* Append one token to the open sequence (SEP closes it). Returns 0, or -1 when out of memory. */
API int st_append(Tree *t, int32_t token) {
    if (grow((void **)&t->corpus, &t->cap_corpus, t->n_corpus + 1, sizeof(int32_t))) return -1;
    int64_t p = t->n_corpus;
    t->corpus[t->n_corpus++] = token;
    if (token == SEP) {
        t->seq_start = t->n_corpus;
        return 0;
    }
    int32_t D = t->max_depth;
    int64_t first = p - D + 1 > t->seq_start ? p - D + 1 : t->seq_start;
    for (int64_t s = first; s <= p; s++) {
        Active *a = &t->active[s % D];
        if (s == p) *a = (Active){0, 0};
        int32_t v = a->node, dv = a->depth, want = (int32_t)(p - s);
        while (dv < want) {
            int32_t c = child_of(t, v, t->corpus[s + dv]);
            if (c == NONE) break;
            v = c;
            dv++;
        }
        *a = (Active){v, dv};
        if (dv < want) continue;           /* s runs on inside a lazy leaf: the corpus holds it */
        if (v != 0 && t->nodes[v].count < 2) continue; /* v is a lazy leaf of s itself */
        if (v == 0) t->nodes[0].count++;
        if (add_occurrence(t, v, dv, token, (int32_t)p + 1)) return -1;
    }
    return 0;
}

/* The node reached by `pattern`, following lazy leaves into the corpus. Returns 1 if the pattern occurs
 * with at least one token after it. */
static int walk(const Tree *t, const int32_t *pattern, int32_t m, int32_t *node, int32_t *depth,
                int64_t *corpus_pos) {
    int32_t v = 0, d = 0;
    while (d < m) {
        int32_t c = child_of(t, v, pattern[d]);
        if (c == NONE) break;
        v = c;
        d++;
        if (t->nodes[v].count == 1 && t->nodes[v].child == NONE) break;
    }
    int64_t p = -1;
    if (d < m) {
        if (v == 0 || t->nodes[v].count != 1 || t->nodes[v].child != NONE) return 0;
        p = t->nodes[v].pos; /* compare the rest with v's one occurrence */
        for (; d < m; d++, p++)
            if (p >= t->n_corpus || t->corpus[p] != pattern[d]) return 0;
    } else if (v != 0 && t->nodes[v].count == 1 && t->nodes[v].child == NONE) {
        p = t->nodes[v].pos;
    }
    *node = v;
    *depth = d;
    *corpus_pos = p;
    /* only a match that something followed can be drafted from (the context always matches itself) */
    if (p >= 0) return p < t->n_corpus && t->corpus[p] != SEP;
    return t->nodes[v].child != NONE;
}

/* The longest suffix of the n tokens before `end`, of length <= max_len, that occurs followed by some
 * token (0: none); node, depth and corpus_pos as walk() leaves them for it. If a suffix occurs followed by
 * a token, so does every shorter one, so the length is found by binary search. */
static int32_t longest_match(const Tree *t, const int32_t *end, int32_t n, int32_t max_len, int32_t *node,
                             int32_t *depth, int64_t *corpus_pos) {
    int32_t lo = 0, hi = n < max_len ? n : max_len;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (walk(t, end - mid, mid, node, depth, corpus_pos)) lo = mid;
        else hi = mid - 1;
    }
    if (lo > 0) walk(t, end - lo, lo, node, depth, corpus_pos);
    return lo;
}

/*
 * Draft after `ctx` (out_tokens and out_probs hold max_tokens entries):
 * 1. m = the longest suffix of ctx (length <= D - 1) that occurs followed by some token; it is the
 *    reported match length and sets budget = min(max_tokens, floor(factor * m + offset)).
 * 2. The draft starts from the suffix of length min(m, D - min(budget, D / 2)): a long match leaves the
 *    draft room in the trie, but keeps at least D - D / 2 of its tokens (a longer draft re-matches).
 * 3. It grows greedily by path confidence C(child) = C(parent) * count(child) / followed(parent) (ties:
 *    lower token id) while C >= min_prob, where followed(parent) counts the parent's occurrences that have a
 *    token after them: the context's own end (and a sequence's last tokens) say nothing about what follows,
 *    so text seen once before is copied with confidence 1, not 1/2. A string that occurs once (a lazy leaf) continues in the corpus with
 *    unchanged confidence, to any depth, up to the end of its sequence.
 * 4. At depth D, a string that occurred twice or more has no children in the trie: the draft re-matches
 *    the longest suffix of (ctx + draft) of length <= D / 2 that occurs followed by a token and goes on
 *    from there, its confidence carried over; without such a match it stops.
 * Writes tokens and confidences; returns the draft length and stores the match length.
 */
API int32_t st_draft(const Tree *t, const int32_t *ctx, int32_t n_ctx, int32_t max_tokens, float min_prob,
                 float factor, float offset, int32_t *out_tokens, float *out_probs, int32_t *match_len) {
    int32_t D = t->max_depth, v = 0, d = 0;
    int64_t p = -1;
    int32_t m = longest_match(t, ctx + n_ctx, n_ctx, D - 1, &v, &d, &p);
    *match_len = m;
    if (m == 0) return 0;
    /* two statements: no fused multiply-add (one rounding) where the compiler would contract one
     * expression, so that the pure-Python trie computes the same budget; clamped before the cast */
    float scaled = factor * (float)m;
    float wanted = scaled + offset;
    int32_t budget = !(wanted > 0.0f) ? 0 : wanted >= (float)max_tokens ? max_tokens : (int32_t)wanted;
    if (budget <= 0) return 0;
    int32_t room = budget < D / 2 ? budget : D / 2;
    if (m > D - room) walk(t, ctx + n_ctx - (D - room), D - room, &v, &d, &p); /* a shorter suffix matches too */
    float conf = 1.0f;
    int32_t n = 0;
    while (n < budget) {
        int32_t token;
        if (p >= 0) { /* one occurrence: follow the corpus */
            if (p >= t->n_corpus || t->corpus[p] == SEP) break;
            token = t->corpus[p++];
        } else if (d == D) {
            /* Re-match. The suffix lies within the draft: from the start (depth <= D - room) depth D takes
             * room draft tokens, and room < D / 2 means room == budget, which ends the draft first; after a
             * re-match (depth <= D / 2) it takes D - D / 2 more. */
            if (longest_match(t, out_tokens + n, n, D / 2, &v, &d, &p) == 0) break;
            continue;
        } else {
            int32_t best = NONE;
            int64_t followed = 0; /* occurrences with a token after them (not the context's own end) */
            for (int32_t c = t->nodes[v].child; c != NONE; c = t->nodes[c].sibling) {
                const Node *x = &t->nodes[c];
                followed += x->count;
                if (best == NONE || x->count > t->nodes[best].count ||
                    (x->count == t->nodes[best].count && x->token < t->nodes[best].token))
                    best = c;
            }
            if (best == NONE) break;
            float next = conf * (float)t->nodes[best].count / (float)followed;
            if (next < min_prob) break;
            conf = next;
            v = best;
            d++;
            token = t->nodes[v].token;
            if (t->nodes[v].count == 1 && t->nodes[v].child == NONE) p = t->nodes[v].pos;
        }
        out_tokens[n] = token;
        out_probs[n] = conf;
        n++;
    }
    return n;
}

/* How often `pattern` (m <= max_depth tokens) occurs, from the trie's counts and lazy leaves (for tests). */
API int64_t st_count(const Tree *t, const int32_t *pattern, int32_t m) {
    int32_t v = 0;
    for (int32_t d = 0; d < m; d++) {
        const Node *x = &t->nodes[v];
        if (v != 0 && x->count == 1 && x->child == NONE) { /* one occurrence: compare the rest */
            for (int64_t p = x->pos; d < m; d++, p++)
                if (p >= t->n_corpus || t->corpus[p] != pattern[d]) return 0;
            return 1;
        }
        if ((v = child_of(t, v, pattern[d])) == NONE) return 0;
    }
    return t->nodes[v].count;
}

API int64_t st_n_nodes(const Tree *t) { return t->n_nodes; }
API int64_t st_n_tokens(const Tree *t) { return t->n_corpus; }
API int64_t st_memory(const Tree *t) {
    return t->cap_nodes * (int64_t)sizeof(Node) + t->cap_corpus * 4 + t->n_root_child * 4 +
           t->max_depth * (int64_t)sizeof(Active) + (int64_t)sizeof(Tree);
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_suffixtree",
                                    "Suffix trie for Suffix Decoding (loaded with ctypes).", -1, NULL};
PyMODINIT_FUNC PyInit__suffixtree(void) { return PyModule_Create(&module); }
