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

Tree *st_new(int32_t max_depth) {
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

void st_free(Tree *t) {
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
int st_append(Tree *t, int32_t token) {
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

/*
 * Draft after `ctx`: find the longest suffix of ctx (length <= max_depth - max_tokens, so that a full draft
 * fits in the trie) that occurs followed by some token, then grow
 * greedily by path confidence D(child) = D(parent) * count(child) / count(parent) (ties: lower token
 * id), while D >= min_prob, up to `budget(match) = min(max_tokens, floor(factor * match + offset))`
 * tokens and depth max_depth. A lazy leaf continues in the corpus with unchanged confidence.
 * Writes tokens and confidences; returns the draft length and stores the match length.
 */
int32_t st_draft(const Tree *t, const int32_t *ctx, int32_t n_ctx, int32_t max_tokens, float min_prob,
                 float factor, float offset, int32_t *out_tokens, float *out_probs, int32_t *match_len) {
    int32_t D = t->max_depth;
    if (max_tokens > D - 1) max_tokens = D - 1;
    int32_t m = n_ctx < D - max_tokens ? n_ctx : D - max_tokens; /* leave the draft room in the trie */
    int32_t v = 0, d = 0;
    int64_t p = -1;
    /* If a suffix of ctx occurs followed by a token, so does every shorter one: binary search the length. */
    int32_t lo = 0, hi = m;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (walk(t, ctx + n_ctx - mid, mid, &v, &d, &p)) lo = mid;
        else hi = mid - 1;
    }
    m = lo;
    *match_len = m;
    if (m == 0 || !walk(t, ctx + n_ctx - m, m, &v, &d, &p)) return 0;
    int32_t budget = (int32_t)(factor * (float)m + offset);
    if (budget > max_tokens) budget = max_tokens;
    float conf = 1.0f;
    int32_t n = 0;
    while (n < budget && d < D) {
        int32_t token;
        if (p >= 0) { /* one occurrence: follow the corpus */
            if (p >= t->n_corpus || t->corpus[p] == SEP) break;
            token = t->corpus[p++];
        } else {
            int32_t best = NONE;
            for (int32_t c = t->nodes[v].child; c != NONE; c = t->nodes[c].sibling) {
                const Node *x = &t->nodes[c];
                if (best == NONE || x->count > t->nodes[best].count ||
                    (x->count == t->nodes[best].count && x->token < t->nodes[best].token))
                    best = c;
            }
            if (best == NONE) break;
            float next = conf * (float)t->nodes[best].count / (float)t->nodes[v].count;
            if (next < min_prob) break;
            conf = next;
            v = best;
            token = t->nodes[v].token;
            if (t->nodes[v].count == 1 && t->nodes[v].child == NONE) p = t->nodes[v].pos;
        }
        if (conf < min_prob) break;
        out_tokens[n] = token;
        out_probs[n] = conf;
        n++;
        d++;
    }
    return n;
}

int64_t st_n_nodes(const Tree *t) { return t->n_nodes; }
int64_t st_n_tokens(const Tree *t) { return t->n_corpus; }
int64_t st_memory(const Tree *t) {
    return t->cap_nodes * (int64_t)sizeof(Node) + t->cap_corpus * 4 + t->n_root_child * 4 +
           t->max_depth * (int64_t)sizeof(Active) + (int64_t)sizeof(Tree);
}

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_suffixtree",
                                    "Suffix trie for Suffix Decoding (loaded with ctypes).", -1, NULL};
PyMODINIT_FUNC PyInit__suffixtree(void) { return PyModule_Create(&module); }
