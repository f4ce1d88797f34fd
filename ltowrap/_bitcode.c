/* ltowrap._bitcode: bitcode.read(), shardkey.canonical(), modulefacts.read() and bitcode.Strtab in C.

   The same walk as ltowrap/formats/bitcode.py's read_python, rule for rule: the Python one
   is the reference, and tests/test_bitcode_native.py holds this one to it (equal trees,
   and BadBitcode for the same streams under the same Want).

   Two layers. The core (bc_read and what it calls) uses no Python API: it decodes the
   stream into a flat buffer of 64-bit words (bc_out: records, block starts and ends) or
   says why the stream is refused. On that buffer, with no Python objects in between, more of
   the core: bc_shard_text makes an index shard's canonical text (formats/shardkey.py),
   bc_module_facts a module's facts (formats/modulefacts.py: its interface text, inline
   assembly, triple and flags, producer), and bc_strtab_read and bc_strtab_relocate a shard's
   module paths and the shard rewritten to name others (formats/bitcode.py's Strtab).
   dev/fuzz/bitcode_fuzz.c includes this file with LTOWRAP_BITCODE_CORE_ONLY defined and fuzzes
   the core alone. The Python layer at the end turns a Want into a bc_want and the buffer into
   Nodes, gives the shard text its callbacks and returns it as a str, returns the facts as
   the tuple modulefacts.read takes, and a shard's paths as str and the rewritten shard as bytes.

   Every count and width comes from the stream, so every sum or product of them is checked
   before it is made: a position is a bit offset (uint64_t) no greater than the stream's
   end, and "n fields of w bits" is compared as n > left / w, never computed as n * w. */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#define BC_MAX_WIDTH 32 /* bitcode.MAX_WIDTH */
#define BC_MAX_DEPTH 64 /* bitcode.MAX_DEPTH */
#define BC_BLOCKINFO 0
#define BC_MODULE 8

/* Event words in bc_out: a header, whose low 2 bits are the tag, then its payload. */
#define BC_TAG_RECORD 0 /* header = count << 2; then count values */
#define BC_TAG_BEGIN 1  /* then bid, width, length_at, start, end */
#define BC_TAG_END 2

enum { BC_OK = 0, BC_BAD = 1, BC_NOMEM = 2 };

enum { OP_LIT, OP_FIXED, OP_VBR, OP_ARRAY, OP_CHAR6, OP_BLOB };

/* bitcode.OVER_BUDGET: a stream's records may go through at most twice as many abbreviation
   operands as it has bits (an abbreviation of many literals would otherwise turn a small
   stream into billions of fields). */
#define BC_OVER_BUDGET "records through more abbreviation operands than the stream has bits for"

static const char BC_CHAR6[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._";

/* --- growable arrays ---------------------------------------------------------------------------- */

typedef struct {
    uint64_t *v;
    size_t n, cap;
} bc_u64s;

/* Room for `more` words; a count from the stream is a uint64_t, which may not fit a size_t. */
static int bc_reserve(bc_u64s *a, uint64_t more64) {
    if (more64 > SIZE_MAX)
        return BC_NOMEM;
    size_t more = (size_t)more64;
    const size_t limit = SIZE_MAX / sizeof(uint64_t);
    if (more <= a->cap - a->n)
        return BC_OK;
    if (more > limit - a->n)
        return BC_NOMEM;
    size_t need = a->n + more, cap = a->cap ? a->cap : 64;
    while (cap < need)
        cap = cap > limit / 2 ? limit : 2 * cap;
    uint64_t *v = realloc(a->v, cap * sizeof(uint64_t));
    if (!v)
        return BC_NOMEM;
    a->v = v;
    a->cap = cap;
    return BC_OK;
}

/* Room for one more of `n` elements of `size` bytes in *v, which holds *cap: doubled when full,
   from `initial`. */
static int bc_grow(void **v, size_t n, size_t *cap, size_t size, size_t initial) {
    if (n < *cap)
        return BC_OK;
    size_t more = *cap ? 2 * *cap : initial;
    if (more > SIZE_MAX / size)
        return BC_NOMEM;
    void *grown = realloc(*v, more * size);
    if (!grown)
        return BC_NOMEM;
    *v = grown;
    *cap = more;
    return BC_OK;
}

static int bc_push(bc_u64s *a, uint64_t x) {
    if (a->n == a->cap && bc_reserve(a, 1))
        return BC_NOMEM;
    a->v[a->n++] = x;
    return BC_OK;
}

/* --- sorting ------------------------------------------------------------------------------------

   BC_SORT(name, T, less) defines `static int name(T *a, size_t n)`, which sorts a[0:n] by
   less(const T *x, const T *y), an inline function: BC_OK, or BC_NOMEM when its scratch of n / 2
   elements cannot be had. Each call site's order is a strict total order on what it sorts, so any
   correct sort gives one result, the one the reference's sorted() gives. A merge sort: n log n
   comparisons at worst, whatever order a stream chooses; insertion sort below BC_SORT_RUN
   elements; two halves already in order are not merged, so input that is sorted already (the
   VALUE_GUID records, which LLVM writes in GUID order) costs one pass. The comparison is inlined,
   where qsort calls a function through a pointer for each. */

#define BC_SORT_RUN 16

#define BC_SORT(name, T, less)                                                                       \
    static void name##_short(T *a, size_t n) {                                                       \
        for (size_t i = 1; i < n; i++) {                                                             \
            T x = a[i];                                                                              \
            size_t j = i;                                                                            \
            for (; j > 0 && less(&x, &a[j - 1]); j--)                                                \
                a[j] = a[j - 1];                                                                     \
            a[j] = x;                                                                                \
        }                                                                                            \
    }                                                                                                \
    /* a[0:n] sorted, tmp room for n / 2 */                                                          \
    static void name##_merge(T *a, size_t n, T *tmp) {                                               \
        if (n <= BC_SORT_RUN) {                                                                      \
            name##_short(a, n);                                                                      \
            return;                                                                                  \
        }                                                                                            \
        size_t h = n / 2, i = 0, j = h, k = 0;                                                       \
        name##_merge(a, h, tmp);                                                                     \
        name##_merge(a + h, n - h, tmp);                                                             \
        if (!less(&a[h], &a[h - 1]))                                                                 \
            return;                                                                                  \
        memcpy(tmp, a, h * sizeof(T)); /* the left half out; merged into a from the front */         \
        /* which side gives the next element is as good as random: chosen without a branch */        \
        while (i < h && j < n) {                                                                     \
            int right = less(&a[j], &tmp[i]);                                                        \
            a[k++] = *(right ? &a[j] : &tmp[i]);                                                     \
            j += right;                                                                              \
            i += !right;                                                                             \
        }                                                                                            \
        memcpy(a + k, tmp + i, (h - i) * sizeof(T)); /* the left's rest; the right's is in place */  \
    }                                                                                                \
    static int name(T *a, size_t n) {                                                                \
        if (n <= BC_SORT_RUN) {                                                                      \
            name##_short(a, n);                                                                      \
            return BC_OK;                                                                            \
        }                                                                                            \
        T *tmp = malloc(n / 2 * sizeof(T));                                                          \
        if (!tmp)                                                                                    \
            return BC_NOMEM;                                                                         \
        name##_merge(a, n, tmp);                                                                     \
        free(tmp);                                                                                   \
        return BC_OK;                                                                                \
    }

static inline int bc_u64_less(const uint64_t *x, const uint64_t *y) {
    return *x < *y;
}

BC_SORT(bc_sort_u64s, uint64_t, bc_u64_less)

/* --- what is wanted ------------------------------------------------------------------------------ */

typedef struct {
    const uint64_t *v; /* sorted, distinct */
    size_t n;
} bc_set;

static inline uint64_t bc_id_at(const char *table, size_t size, size_t k) {
    return *(const uint64_t *)(table + k * size);
}

/* Where id is in table[0:n]: n elements of `size` bytes whose first member is a uint64_t id, sorted
   by it, no two with one id. Its index, or n. Ids that run first, first + 1, ... to the last (a
   shard's value ids, and its module ids from LLVM 19 on) are found by place, others by bisection. */
static inline size_t bc_find(const void *table, size_t n, size_t size, uint64_t id) {
    const char *t = table;
    if (n == 0)
        return 0;
    uint64_t first = bc_id_at(t, size, 0);
    if (bc_id_at(t, size, n - 1) - first == n - 1)
        return id - first < n ? (size_t)(id - first) : n;
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t at = bc_id_at(t, size, mid);
        if (at == id)
            return mid;
        if (at < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return n;
}

static inline int bc_in(const bc_set *s, uint64_t x) {
    return bc_find(s->v, s->n, sizeof *s->v, x) < s->n;
}

/* What Want's maps say of one block id (is_top: the top level, TOP_LEVEL). */
typedef struct {
    int is_top;
    uint64_t bid;
    int has_only, has_unread, has_first;
    bc_set only, unread;
    uint64_t first; /* Want.first's value; a negative one is 0, one above 2**64-1 has_first = 0 */
} bc_key;

typedef struct {
    int any_enter; /* Want.enter is None */
    bc_set enter, skip;
    const bc_key *keys;
    size_t nkeys;
    int blobs;
} bc_want;

static const bc_key *bc_key_of(const bc_want *w, int is_top, uint64_t bid) {
    for (size_t i = 0; i < w->nkeys; i++)
        if (w->keys[i].is_top == is_top && (is_top || w->keys[i].bid == bid))
            return &w->keys[i];
    return NULL;
}

static int bc_enters(const bc_want *w, uint64_t bid) {
    return (w->any_enter || bc_in(&w->enter, bid)) && !bc_in(&w->skip, bid);
}

/* Want.fields_of(bid), with codes below 64 answered from a bit mask. */
typedef struct {
    const bc_set *only, *unread; /* only NULL: any code not unread */
    uint64_t low;
} bc_filter;

static int bc_wanted_slow(const bc_filter *f, uint64_t code) {
    if (f->unread && bc_in(f->unread, code))
        return 0;
    return !f->only || bc_in(f->only, code);
}

static void bc_filter_init(bc_filter *f, const bc_key *k) {
    f->only = k && k->has_only ? &k->only : NULL;
    f->unread = k && k->has_unread ? &k->unread : NULL;
    f->low = 0;
    for (uint64_t c = 0; c < 64; c++)
        if (bc_wanted_slow(f, c))
            f->low |= (uint64_t)1 << c;
}

static inline int bc_wanted(const bc_filter *f, uint64_t code) {
    return code < 64 ? (int)((f->low >> code) & 1) : bc_wanted_slow(f, code);
}

/* --- abbreviations and BLOCKINFO scopes ----------------------------------------------------------- */

typedef struct {
    uint64_t value; /* a literal's value, a fixed or vbr field's width */
    int kind;
} bc_op;

typedef struct {
    size_t first, n; /* in bc_ctx.ops */
} bc_abbrev;

/* A list of abbreviation ids (indexes in bc_ctx.abbrevs). */
typedef bc_u64s bc_ids;

/* BLOCKINFO's abbreviations by block id: an open-addressing table (a hostile stream may
   name many block ids). */
typedef struct {
    uint64_t bid;
    int used;
    bc_ids ids;
} bc_slot;

typedef struct {
    bc_slot *slots;
    size_t n, cap; /* cap: 0 or a power of two */
} bc_scope;

static uint64_t bc_hash(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static bc_slot *bc_scope_find(const bc_scope *s, uint64_t bid) {
    if (!s->cap)
        return NULL;
    for (size_t i = bc_hash(bid) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (!s->slots[i].used)
            return NULL;
        if (s->slots[i].bid == bid)
            return &s->slots[i];
    }
}

static void bc_scope_free(bc_scope *s) {
    for (size_t i = 0; i < s->cap; i++)
        free(s->slots[i].ids.v);
    free(s->slots);
    s->slots = NULL;
    s->n = s->cap = 0;
}

static int bc_scope_add(bc_scope *s, uint64_t bid, uint64_t id) {
    bc_slot *slot = bc_scope_find(s, bid);
    if (!slot) {
        if (2 * (s->n + 1) > s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 16;
            if (cap > SIZE_MAX / sizeof(bc_slot))
                return BC_NOMEM;
            bc_slot *slots = calloc(cap, sizeof(bc_slot));
            if (!slots)
                return BC_NOMEM;
            for (size_t i = 0; i < s->cap; i++) {
                if (!s->slots[i].used)
                    continue;
                size_t j = bc_hash(s->slots[i].bid) & (cap - 1);
                while (slots[j].used)
                    j = (j + 1) & (cap - 1);
                slots[j] = s->slots[i];
            }
            free(s->slots);
            s->slots = slots;
            s->cap = cap;
        }
        size_t j = bc_hash(bid) & (s->cap - 1);
        while (s->slots[j].used)
            j = (j + 1) & (s->cap - 1);
        slot = &s->slots[j];
        slot->used = 1;
        slot->bid = bid;
        s->n++;
    }
    return bc_push(&slot->ids, id);
}

static int bc_scope_copy(bc_scope *to, const bc_scope *from) {
    memset(to, 0, sizeof *to);
    if (!from->cap)
        return BC_OK;
    to->slots = calloc(from->cap, sizeof(bc_slot));
    if (!to->slots)
        return BC_NOMEM;
    to->cap = from->cap;
    to->n = from->n;
    for (size_t i = 0; i < from->cap; i++) {
        if (!from->slots[i].used)
            continue;
        to->slots[i].used = 1;
        to->slots[i].bid = from->slots[i].bid;
        size_t n = from->slots[i].ids.n;
        if (bc_reserve(&to->slots[i].ids, n ? n : 1)) {
            bc_scope_free(to);
            return BC_NOMEM;
        }
        if (n)
            memcpy(to->slots[i].ids.v, from->slots[i].ids.v, n * sizeof(uint64_t));
        to->slots[i].ids.n = n;
    }
    return BC_OK;
}

/* --- the read ------------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *data;
    size_t len;
    const bc_want *want;
    bc_u64s *out;
    bc_op *ops;
    size_t nops, capops;
    bc_abbrev *abbrevs;
    size_t nabbrevs, capabbrevs;
    bc_filter *filters; /* one for each of want->keys */
    bc_filter all;      /* for a block no key names */
    uint64_t budget;    /* the abbreviation operands records may still go through (bitcode.operand_budget) */
    const char *error;
    char message[80]; /* error, when it has a number in it (as bitcode.py's messages) */
} bc_ctx;

/* A reader's cursor: bit positions in the stream, pos possibly past end after an alignment
   (every read checks). */
typedef struct {
    uint64_t pos, end;
} bc_cursor;

#define FAIL(msg)            \
    do {                     \
        c->error = (msg);    \
        e = BC_BAD;          \
        goto done;           \
    } while (0)
#define TRY(x)                       \
    do {                             \
        if ((e = (x)) != BC_OK)      \
            goto done;               \
    } while (0)
#define BAD(msg)                 \
    do {                         \
        c->error = (msg);        \
        return BC_BAD;           \
    } while (0)
#define BADF(...)                                                   \
    do {                                                            \
        snprintf(c->message, sizeof c->message, __VA_ARGS__);       \
        c->error = c->message;                                      \
        return BC_BAD;                                              \
    } while (0)
#define CHECK(x)                 \
    do {                         \
        int e_ = (x);            \
        if (e_ != BC_OK)         \
            return e_;           \
    } while (0)

static inline int bc_has(const bc_cursor *r, uint64_t n) {
    return r->pos <= r->end && n <= r->end - r->pos;
}

/* 57 or more bits from bit pos on, bits past the data 0. */
static inline uint64_t bc_peek(const bc_ctx *c, uint64_t pos) {
    size_t i = (size_t)(pos >> 3);
    uint64_t w = 0;
    if (i < c->len && c->len - i >= 8) {
        memcpy(&w, c->data + i, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
    } else {
        for (size_t k = 0; k < 8 && i + k < c->len; k++)
            w |= (uint64_t)c->data[i + k] << (8 * k);
    }
    return w >> (pos & 7);
}

static inline void bc_align32(bc_cursor *r) {
    r->pos = (r->pos + 31) & ~(uint64_t)31;
}

/* Reader.fixed, n <= 32. */
static inline int bc_fixed(bc_ctx *c, bc_cursor *r, unsigned n, uint64_t *out) {
    if (n == 0) {
        *out = 0;
        return BC_OK;
    }
    if (!bc_has(r, n))
        BAD("read past the end");
    *out = bc_peek(c, r->pos) & (((uint64_t)1 << n) - 1);
    r->pos += n;
    return BC_OK;
}

/* The value of n-bit VBR chunks from bit *at of a window of 57 bits read, if its last chunk is
   within them: 1, *out the value and *at past it; else 0. Such a value needs no check: its
   chunks are in the stream, and it has fewer than 57 bits. */
static inline int bc_vbr_window(uint64_t window, unsigned n, unsigned *at, uint64_t *out) {
    uint64_t hi = (uint64_t)1 << (n - 1), value = 0;
    for (unsigned used = *at, shift = 0; used + n <= 57; used += n, shift += n - 1) {
        uint64_t chunk = (window >> used) & ((hi << 1) - 1);
        value |= (chunk & (hi - 1)) << shift;
        if (!(chunk & hi)) {
            *at = used + n;
            *out = value;
            return 1;
        }
    }
    return 0;
}

/* Reader.vbr, 2 <= n <= 32: no chunk starts at bit 64 or above, and the value is below 2**64. */
static int bc_vbr_chunks(bc_ctx *c, bc_cursor *r, unsigned n, uint64_t *out) {
    uint64_t hi = (uint64_t)1 << (n - 1), value = 0, chunk;
    unsigned shift = 0, at = 0;
    if (bc_has(r, 57) && bc_vbr_window(bc_peek(c, r->pos), n, &at, out)) {
        r->pos += at;
        return BC_OK;
    }
    for (;;) {
        CHECK(bc_fixed(c, r, n, &chunk));
        uint64_t payload = chunk & (hi - 1);
        if (shift && shift + (n - 1) > 64 && (payload >> (64 - shift)))
            BAD("vbr too long");
        value |= payload << shift;
        if (!(chunk & hi))
            break;
        shift += n - 1;
        if (shift >= 64)
            BAD("vbr too long");
    }
    *out = value;
    return BC_OK;
}

/* Most values are one chunk: read here, the others by bc_vbr_chunks. */
static inline int bc_vbr(bc_ctx *c, bc_cursor *r, unsigned n, uint64_t *out) {
    if (bc_has(r, n)) {
        uint64_t hi = (uint64_t)1 << (n - 1), chunk = bc_peek(c, r->pos) & ((hi << 1) - 1);
        if (!(chunk & hi)) {
            r->pos += n;
            *out = chunk;
            return BC_OK;
        }
    }
    return bc_vbr_chunks(c, r, n, out);
}

/* Reader.skip_vbr: count vbr fields of this width passed over, their chunks counted and
   their values not checked. */
static int bc_skip_vbr(bc_ctx *c, bc_cursor *r, uint64_t count, unsigned width) {
    if (r->pos > r->end || count > (r->end - r->pos) / width)
        BAD("read past the end");
    uint64_t hi = (uint64_t)1 << (width - 1);
    unsigned per = 57 / width; /* whole chunks in one peek */
    while (count) {
        if (!bc_has(r, width))
            BAD("read past the end");
        uint64_t w = bc_peek(c, r->pos);
        for (unsigned k = 0; k < per && count; k++) {
            if (!bc_has(r, width))
                BAD("read past the end");
            if (!((w >> (k * width)) & hi))
                count--;
            r->pos += width;
        }
    }
    return BC_OK;
}

static const char *bc_array_of(int kind) {
    static const char *const msgs[] = {"an array of lit", "an array of fixed", "an array of vbr",
                                       "an array of array", "an array of char6", "an array of blob"};
    return msgs[kind];
}

/* Reader.run: n fields of one encoding, pushed to the output. */
static int bc_run(bc_ctx *c, bc_cursor *r, uint64_t n, int kind, uint64_t width) {
    int char6 = kind == OP_CHAR6;
    if (char6) {
        kind = OP_FIXED;
        width = 6;
    }
    if ((kind != OP_VBR && kind != OP_FIXED) || (kind == OP_VBR && width < 2))
        BAD(bc_array_of(kind));
    uint64_t w = width ? width : 1;
    if (r->pos > r->end || n > (r->end - r->pos) / w) /* as LLVM's isSizePlausible */
        BAD("read past the end");
    CHECK(bc_reserve(c->out, n));
    uint64_t *v = c->out->v + c->out->n;
    if (kind == OP_FIXED) {
        uint64_t mask = ((uint64_t)1 << width) - 1;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t x = bc_peek(c, r->pos) & mask;
            r->pos += width;
            v[i] = char6 ? (uint64_t)(unsigned char)BC_CHAR6[x] : x;
        }
    } else {
        /* Values cut from one 57-bit window while they end within it, a value longer than a
           window read alone. */
        unsigned wd = (unsigned)width;
        uint64_t i = 0;
        while (i < n) {
            if (bc_has(r, 57)) {
                uint64_t window = bc_peek(c, r->pos);
                unsigned used = 0;
                while (i < n && bc_vbr_window(window, wd, &used, &v[i]))
                    i++;
                r->pos += used;
                if (used)
                    continue;
            }
            CHECK(bc_vbr(c, r, wd, &v[i]));
            i++;
        }
    }
    c->out->n += (size_t)n;
    return BC_OK;
}

/* define_abbrev: the abbreviation whose DEFINE_ABBREV id was just read; *id its index. */
static int bc_define_abbrev(bc_ctx *c, bc_cursor *r, uint64_t *id) {
    uint64_t n, x;
    size_t first = c->nops, count = 0;
    CHECK(bc_vbr(c, r, 5, &n));
    while (count < n) {
        bc_op op;
        CHECK(bc_fixed(c, r, 1, &x));
        if (x) {
            op.kind = OP_LIT;
            CHECK(bc_vbr(c, r, 8, &op.value));
        } else {
            uint64_t enc;
            CHECK(bc_fixed(c, r, 3, &enc));
            if (enc == 1 || enc == 2) {
                uint64_t width;
                CHECK(bc_vbr(c, r, 5, &width));
                if (width == 0) {
                    op.kind = OP_LIT;
                    op.value = 0;
                } else if (width > BC_MAX_WIDTH || (enc == 2 && width < 2)) {
                    BADF("a %s%llu field", enc == 1 ? "fixed" : "vbr", (unsigned long long)width);
                } else {
                    op.kind = enc == 1 ? OP_FIXED : OP_VBR;
                    op.value = width;
                }
            } else if (enc >= 3 && enc <= 5) {
                op.kind = enc == 3 ? OP_ARRAY : enc == 4 ? OP_CHAR6 : OP_BLOB;
                op.value = 0;
            } else {
                BADF("bad abbreviation encoding %llu", (unsigned long long)enc);
            }
        }
        void *grown = c->ops;
        if (bc_grow(&grown, c->nops, &c->capops, sizeof(bc_op), 256))
            return BC_NOMEM;
        c->ops = grown;
        c->ops[c->nops++] = op;
        count++;
    }
    /* As LLVM's reader: a code first, an array second to last with its element after it,
       a blob last. */
    const bc_op *ops = c->ops + first;
    if (count == 0 || ops[0].kind == OP_ARRAY || ops[0].kind == OP_BLOB)
        BAD("an abbreviation without a code");
    for (size_t i = 0; i < count; i++) {
        if (ops[i].kind == OP_ARRAY) { /* the first array */
            if (i != count - 2 || ops[count - 1].kind == OP_ARRAY || ops[count - 1].kind == OP_BLOB)
                BAD("an abbreviation's array not second to last");
            break;
        }
    }
    for (size_t i = 0; i + 1 < count; i++)
        if (ops[i].kind == OP_BLOB)
            BAD("an abbreviation's blob not last");
    void *grown = c->abbrevs;
    if (bc_grow(&grown, c->nabbrevs, &c->capabbrevs, sizeof(bc_abbrev), 64))
        return BC_NOMEM;
    c->abbrevs = grown;
    c->abbrevs[c->nabbrevs].first = first;
    c->abbrevs[c->nabbrevs].n = count;
    *id = c->nabbrevs++;
    return BC_OK;
}

/* read_record (blobs: one field per byte) and _record (else a blob as [byte offset, length]). */
static int bc_record(bc_ctx *c, bc_cursor *r, const bc_op *ops, size_t nops, int blobs) {
    int blob_as_span = nops && ops[nops - 1].kind == OP_BLOB && !blobs;
    size_t scalars = blob_as_span ? nops - 1 : nops;
    for (size_t i = 0; i < scalars; i++) {
        uint64_t x;
        switch (ops[i].kind) {
        case OP_LIT:
            x = ops[i].value;
            break;
        case OP_FIXED:
            CHECK(bc_fixed(c, r, (unsigned)ops[i].value, &x));
            break;
        case OP_VBR:
            CHECK(bc_vbr(c, r, (unsigned)ops[i].value, &x));
            break;
        case OP_CHAR6:
            CHECK(bc_fixed(c, r, 6, &x));
            x = (unsigned char)BC_CHAR6[x];
            break;
        case OP_ARRAY: {
            uint64_t n;
            CHECK(bc_vbr(c, r, 6, &n));
            CHECK(bc_run(c, r, n, ops[i + 1].kind, ops[i + 1].value));
            i++;
            continue;
        }
        default: { /* OP_BLOB, last */
            uint64_t n;
            CHECK(bc_vbr(c, r, 6, &n));
            bc_align32(r);
            if (r->pos > r->end || n > (r->end - r->pos) / 8)
                BAD("read past the end");
            CHECK(bc_reserve(c->out, n));
            const uint8_t *p = c->data + (r->pos >> 3);
            uint64_t *v = c->out->v + c->out->n;
            for (uint64_t k = 0; k < n; k++)
                v[k] = p[k];
            c->out->n += (size_t)n;
            r->pos += 8 * n;
            bc_align32(r);
            continue;
        }
        }
        CHECK(bc_push(c->out, x));
    }
    if (r->pos > r->end)
        BAD("read past the end");
    if (blob_as_span) {
        uint64_t n;
        CHECK(bc_vbr(c, r, 6, &n));
        bc_align32(r);
        CHECK(bc_push(c->out, r->pos >> 3));
        CHECK(bc_push(c->out, n));
        if (r->pos > r->end || n > (r->end - r->pos) / 8)
            BAD("read past the end");
        r->pos += 8 * n;
        bc_align32(r);
        if (r->pos > r->end)
            BAD("read past the end");
    }
    return BC_OK;
}

/* Reader.skip: past one record laid out by these ops; counts read as any vbr, what they
   count checked only for running past the end. */
static int bc_skip(bc_ctx *c, bc_cursor *r, const bc_op *ops, size_t nops) {
    for (size_t i = 0; i < nops; i++) {
        uint64_t n;
        switch (ops[i].kind) {
        case OP_ARRAY: {
            CHECK(bc_vbr(c, r, 6, &n));
            int kind = ops[i + 1].kind;
            if (kind == OP_FIXED || kind == OP_CHAR6) {
                uint64_t w = kind == OP_CHAR6 ? 6 : ops[i + 1].value;
                if (r->pos > r->end || n > (r->end - r->pos) / w)
                    BAD("read past the end");
                r->pos += n * w;
            } else if (kind == OP_VBR) {
                CHECK(bc_skip_vbr(c, r, n, (unsigned)ops[i + 1].value));
            } else {
                BAD(bc_array_of(kind));
            }
            i++;
            continue;
        }
        case OP_BLOB:
            CHECK(bc_vbr(c, r, 6, &n));
            bc_align32(r);
            if (r->pos > r->end || n > (r->end - r->pos) / 8)
                BAD("read past the end");
            r->pos += 8 * n;
            bc_align32(r);
            break;
        case OP_FIXED:
            r->pos += ops[i].value;
            break;
        case OP_CHAR6:
            r->pos += 6;
            break;
        case OP_VBR:
            CHECK(bc_skip_vbr(c, r, 1, (unsigned)ops[i].value));
            break;
        default: /* OP_LIT */
            break;
        }
        if (r->pos > r->end)
            BAD("read past the end");
    }
    if (r->pos > r->end)
        BAD("read past the end");
    return BC_OK;
}

typedef struct {
    uint64_t bid, width, length_at, start, end;
} bc_block_at;

/* enter_block: the block whose ENTER_SUBBLOCK id was just read. */
static int bc_enter_block(bc_ctx *c, bc_cursor *r, bc_block_at *b) {
    uint64_t words;
    CHECK(bc_vbr(c, r, 8, &b->bid));
    CHECK(bc_vbr(c, r, 4, &b->width));
    if (b->width > BC_MAX_WIDTH)
        BADF("abbreviation ids of %llu bits", (unsigned long long)b->width);
    bc_align32(r);
    b->length_at = r->pos;
    CHECK(bc_fixed(c, r, 32, &words));
    b->start = r->pos;
    b->end = r->pos + 32 * words;
    if (b->end > r->end)
        BAD("block runs past the end");
    return BC_OK;
}

/* _read_block: a block's contents (the top level's when is_top) up to its END_BLOCK, as
   events in c->out when emit (else read for what its BLOCKINFO defines, and dropped). */
static int bc_block(bc_ctx *c, bc_cursor *r, unsigned width, int is_top, uint64_t bid, bc_scope *scope,
                    unsigned depth, int emit) {
    int e = BC_OK;
    int is_info = !is_top && bid == BC_BLOCKINFO;
    bc_ids abbrevs = {0};
    if (!is_top) {
        bc_slot *s = bc_scope_find(scope, bid);
        if (s && s->ids.n) {
            TRY(bc_reserve(&abbrevs, s->ids.n));
            memcpy(abbrevs.v, s->ids.v, s->ids.n * sizeof(uint64_t));
            abbrevs.n = s->ids.n;
        }
    }
    /* BLOCKINFO is read whole whatever the Want says: the other blocks need what it defines. */
    const bc_key *key = is_info ? NULL : bc_key_of(c->want, is_top, bid);
    const bc_filter *filter = key ? &c->filters[key - c->want->keys] : &c->all;
    int has_limit = key && key->has_first;
    uint64_t limit = key ? key->first : 0;
    int has_setbid = 0;
    uint64_t setbid = 0, entries = 0;
    while (bc_has(r, width)) {
        if (has_limit && entries >= limit)
            goto done;
        uint64_t code;
        TRY(bc_fixed(c, r, width, &code));
        if (code == 0) { /* END_BLOCK */
            bc_align32(r);
            goto done;
        }
        if (code == 1) { /* ENTER_SUBBLOCK */
            bc_block_at sub;
            TRY(bc_enter_block(c, r, &sub));
            entries++;
            int enters = bc_enters(c->want, sub.bid);
            if (sub.bid == BC_BLOCKINFO || enters) {
                if (depth >= BC_MAX_DEPTH)
                    FAIL("blocks nested too deep");
                /* A module's BLOCKINFO is its own: a copy of what the top level defined. */
                bc_scope copy, *inner = scope;
                if (is_top && sub.bid == BC_MODULE) {
                    TRY(bc_scope_copy(&copy, scope));
                    inner = &copy;
                }
                int inner_emit = emit && enters;
                if (inner_emit) {
                    if ((e = bc_reserve(c->out, 6)) != BC_OK) {
                        if (inner == &copy)
                            bc_scope_free(&copy);
                        goto done;
                    }
                    uint64_t *v = c->out->v + c->out->n;
                    v[0] = BC_TAG_BEGIN;
                    v[1] = sub.bid;
                    v[2] = sub.width;
                    v[3] = sub.length_at;
                    v[4] = sub.start;
                    v[5] = sub.end;
                    c->out->n += 6;
                }
                bc_cursor inner_r = {sub.start, sub.end};
                e = bc_block(c, &inner_r, (unsigned)sub.width, 0, sub.bid, inner, depth + 1, inner_emit);
                if (inner == &copy)
                    bc_scope_free(&copy);
                if (e)
                    goto done;
                if (inner_emit)
                    TRY(bc_push(c->out, BC_TAG_END));
            }
            r->pos = sub.end;
            continue;
        }
        if (code == 2) { /* DEFINE_ABBREV */
            uint64_t id;
            TRY(bc_define_abbrev(c, r, &id));
            if (is_info) {
                if (!has_setbid)
                    FAIL("abbreviation before SETBID");
                TRY(bc_scope_add(scope, setbid, id));
            } else {
                TRY(bc_push(&abbrevs, id));
            }
            continue;
        }
        entries++;
        size_t at = c->out->n;
        TRY(bc_push(c->out, 0));
        if (code == 3) { /* UNABBREV_RECORD: code, count, fields, all VBR6 */
            uint64_t rec_code, n;
            if (c->budget < 2)
                FAIL(BC_OVER_BUDGET);
            c->budget -= 2;
            TRY(bc_vbr(c, r, 6, &rec_code));
            TRY(bc_vbr(c, r, 6, &n));
            TRY(bc_push(c->out, rec_code));
            if (bc_wanted(filter, rec_code))
                TRY(bc_run(c, r, n, OP_VBR, 6));
            else
                TRY(bc_skip_vbr(c, r, n, 6));
        } else {
            if (code - 4 >= abbrevs.n) {
                snprintf(c->message, sizeof c->message, "undefined abbreviation %llu", (unsigned long long)code);
                FAIL(c->message);
            }
            const bc_abbrev *a = &c->abbrevs[abbrevs.v[code - 4]];
            if (c->budget < a->n)
                FAIL(BC_OVER_BUDGET);
            c->budget -= a->n;
            const bc_op *ops = c->ops + a->first;
            if (ops[0].kind == OP_LIT && !bc_wanted(filter, ops[0].value)) {
                TRY(bc_push(c->out, ops[0].value));
                TRY(bc_skip(c, r, ops, a->n));
            } else {
                TRY(bc_record(c, r, ops, a->n, c->want->blobs));
                if (!bc_wanted(filter, c->out->v[at + 1]))
                    c->out->n = at + 2;
            }
        }
        uint64_t count = c->out->n - at - 1;
        c->out->v[at] = (count << 2) | BC_TAG_RECORD;
        if (is_info && c->out->v[at + 1] == 1) { /* SETBID */
            if (count < 2)
                FAIL("SETBID without a block id");
            setbid = c->out->v[at + 2];
            has_setbid = 1;
        }
        if (!emit)
            c->out->n = at;
    }
    if (!is_top)
        FAIL("block without END_BLOCK");
done:
    free(abbrevs.v);
    return e;
}

/* The core's entry: the stream (a bitcode file's bitstream, from its magic on) read as
   `want` says into `out` (events, see BC_TAG_*). BC_OK, BC_BAD with *error set, or
   BC_NOMEM; for BC_BAD, why in `error`. `out` is the caller's to free, whatever the answer. */
static int bc_read(const uint8_t *data, size_t len, const bc_want *want, bc_u64s *out, char *error,
                   size_t error_size) {
    bc_ctx ctx = {0};
    ctx.data = data;
    ctx.len = len;
    ctx.want = want;
    ctx.out = out;
    int e;
    error[0] = 0;
    if (len > (UINT64_MAX >> 8)) {
        snprintf(error, error_size, "stream too large");
        return BC_BAD;
    }
    ctx.budget = 16 * (uint64_t)len + 64; /* twice the stream's bits, and a little */
    ctx.filters = calloc(want->nkeys ? want->nkeys : 1, sizeof(bc_filter));
    if (!ctx.filters)
        return BC_NOMEM;
    for (size_t i = 0; i < want->nkeys; i++)
        bc_filter_init(&ctx.filters[i], &want->keys[i]);
    bc_filter_init(&ctx.all, NULL);
    bc_cursor r = {32, (uint64_t)len * 8};
    bc_scope scope = {0};
    e = bc_block(&ctx, &r, 2, 1, 0, &scope, 0, 1);
    bc_scope_free(&scope);
    free(ctx.filters);
    free(ctx.ops);
    free(ctx.abbrevs);
    if (e == BC_BAD)
        snprintf(error, error_size, "%s", ctx.error ? ctx.error : "bad bitcode");
    return e;
}

/* --- a shard's canonical text ------------------------------------------------------------------------

   formats/shardkey.py's canonical_python, rule for rule, from the events of a whole read (Want()):
   the same lines in the same order, BadBitcode with the same message where it refuses a shard, the
   same raw fallback (its reason, which is part of the text, included) where a summary block is not
   understood. tests/test_shardkey_native.py holds the two equal. What names a module (digest_of,
   interface_of) and whether the backend reads the link's block count (sample_profiled) come from
   the caller through bc_shard_env, so this layer too runs without Python (the fuzz target's
   callbacks are C). What it does not take answers BC_DEFER, and the caller runs the Python one:
   a GUID of more than 64 bits (v11's two halves with a half wider than 32), a name that is not
   ASCII. Block nesting is bounded by the read (BC_MAX_DEPTH), so is the recursion of
   bc_block_lines. */

enum { BC_UNKNOWN = 3, BC_CALLBACK = 4, BC_DEFER = 5 };

#define BC_MODULE_STRTAB 19
#define BC_SUMMARY 20
enum { MST_ENTRY = 1, MST_HASH = 2 };
/* bitcodes.py's FS_* codes that the text names. */
enum {
    FS_COMBINED = 4, FS_COMBINED_PROFILE = 5, FS_COMBINED_VAR = 6, FS_COMBINED_ALIAS = 8, FS_ORIGINAL_NAME = 9,
    FS_VERSION = 10, FS_TYPE_TESTS = 11, FS_TYPE_CHECKED_LOAD_CONST_VCALL = 15, FS_VALUE_GUID = 16,
    FS_CFI_DEFS = 17, FS_CFI_DECLS = 18, FS_FLAGS = 20, FS_TYPE_ID = 21, FS_BLOCK_COUNT = 24,
};
#define BC_IMPORT_AS_DECLARATION ((uint64_t)1 << 10)

/* shardkey.py's tables, given by the caller (one definition, in Python). */
typedef struct {
    const char *format;      /* FORMAT */
    const char *unread_line; /* BLOCK_COUNT_UNREAD */
    bc_set known;            /* KNOWN_VERSIONS */
    bc_set declaration;      /* DECLARATION_VERSIONS */
    uint64_t split_since;    /* SPLIT_GUID_SINCE */
} bc_shard_tables;

/* A growing text; out of memory, later puts do nothing and `failed` says so (checked once). */
typedef struct {
    char *p;
    size_t n, cap;
    int failed;
} bc_text;

typedef struct {
    void *ctx;
    /* Append the name of the module at path[0:n] to out: its digest_of, or when by_interface its
       interface_of. BC_OK, BC_CALLBACK, BC_DEFER or BC_NOMEM. */
    int (*name)(void *ctx, int by_interface, const uint8_t *path, size_t n, bc_text *out);
    int has_interface; /* interface_of was given */
    /* Whether the backend reads the link's block count; NULL: it does. */
    int (*block_count_read)(void *ctx, int *answer);
} bc_shard_env;

/* Room for n more bytes in t: 0, or -1 (and `failed` set) when there is none. */
static int bc_room(bc_text *t, size_t n) {
    if (t->failed)
        return -1;
    if (n <= t->cap - t->n)
        return 0;
    if (n > SIZE_MAX / 4 - t->n) {
        t->failed = 1;
        return -1;
    }
    size_t need = t->n + n, cap = t->cap ? t->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = realloc(t->p, cap);
    if (!p) {
        t->failed = 1;
        return -1;
    }
    t->p = p;
    t->cap = cap;
    return 0;
}

/* The text's hot path (a shard's text is tens of kilobytes of short pieces): the room
   checked inline, grown out of line. */
static inline void bc_put(bc_text *t, const void *s, size_t n) {
    if (n == 0 || (n > t->cap - t->n && bc_room(t, n)) || t->failed)
        return;
    memcpy(t->p + t->n, s, n);
    t->n += n;
}

static inline void bc_puts(bc_text *t, const char *s) {
    bc_put(t, s, strlen(s));
}

/* The number of decimal digits of x: from its bit length, floor(log10(2) * bits) (1233 / 4096 is
   log10(2) to the bits a uint64_t has), which is the count or one less. */
static inline unsigned bc_digits(uint64_t x) {
    static const uint64_t pow10[20] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000,
                                       10000000000ULL, 100000000000ULL, 1000000000000ULL, 10000000000000ULL,
                                       100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL,
                                       100000000000000000ULL, 1000000000000000000ULL, 10000000000000000000ULL};
    unsigned bits = 64 - (unsigned)__builtin_clzll(x | 1), t = bits * 1233 >> 12;
    return t + (x >= pow10[t]) + (x == 0);
}

static const char BC_PAIRS[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                               "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                               "8081828384858687888990919293949596979899";

/* The 8 digits of y < 10^8 at p[0:8], leading zeros and all: its two halves' pairs, which do
   not wait on each other. */
static inline void bc_put8(char *p, uint32_t y) {
    uint32_t high = y / 10000, low = y % 10000;
    memcpy(p, BC_PAIRS + 2 * (high / 100), 2);
    memcpy(p + 2, BC_PAIRS + 2 * (high % 100), 2);
    memcpy(p + 4, BC_PAIRS + 2 * (low / 100), 2);
    memcpy(p + 6, BC_PAIRS + 2 * (low % 100), 2);
}

/* x in decimal, written in place from its last digit: 8 digits a step (a GUID, most of the
   text, takes two), then two a step, in 32-bit arithmetic. */
static void bc_putu(bc_text *t, uint64_t x) {
    unsigned n = bc_digits(x);
    if ((n > t->cap - t->n && bc_room(t, n)) || t->failed)
        return;
    char *p = t->p + t->n + n;
    t->n += n;
    while (x >= 100000000) {
        uint64_t q = x / 100000000;
        bc_put8(p -= 8, (uint32_t)(x - q * 100000000));
        x = q;
    }
    uint32_t y = (uint32_t)x;
    for (; y >= 100; y /= 100)
        memcpy(p -= 2, BC_PAIRS + 2 * (y % 100), 2);
    /* y < 100, its pair "0y" or two digits: the last digit, then the first at p - 2 when there
       are two, else the last again. No branch: a GUID is 19 or 20 digits about as often. */
    const char *pair = BC_PAIRS + 2 * y;
    int two = y >= 10;
    p[-1] = pair[1];
    p[-1 - two] = pair[1 - two];
}

/* bitcode.ints_text */
static void bc_putints(bc_text *t, const uint64_t *v, size_t n) {
    for (size_t k = 0; k < n; k++) {
        if (k)
            bc_put(t, " ", 1);
        bc_putu(t, v[k]);
    }
}

static void bc_text_free(bc_text *t) {
    free(t->p);
    memset(t, 0, sizeof *t);
}

/* Each BEGIN's length_at word (v[i + 3], which the text does not use) becomes the index just past
   its END: a block's children are then walked, and a sub-block jumped over, without a search. */
static int bc_index_ends(bc_u64s *ev) {
    size_t stack[BC_MAX_DEPTH + 2];
    int sp = 0;
    for (size_t i = 0; i < ev->n;) {
        uint64_t h = ev->v[i];
        if ((h & 3) == BC_TAG_RECORD) {
            if (h >> 2 == 0 || (h >> 2) > ev->n - i - 1)
                return BC_BAD;
            i += 1 + (size_t)(h >> 2);
        } else if ((h & 3) == BC_TAG_BEGIN) {
            if (sp == BC_MAX_DEPTH + 2 || ev->n - i < 6)
                return BC_BAD;
            stack[sp++] = i;
            i += 6;
        } else {
            if (!sp)
                return BC_BAD;
            ev->v[stack[--sp] + 3] = i + 1;
            i += 1;
        }
    }
    return sp ? BC_BAD : BC_OK;
}

static inline size_t bc_next(const uint64_t *v, size_t i) {
    uint64_t h = v[i];
    return (h & 3) == BC_TAG_RECORD ? i + 1 + (size_t)(h >> 2) : (h & 3) == BC_TAG_BEGIN ? (size_t)v[i + 3] : i + 1;
}

#define BC_IS_BEGIN(v, i) (((v)[i] & 3) == BC_TAG_BEGIN)
#define BC_COUNT(v, i) ((size_t)((v)[i] >> 2))
/* The children of the block whose BEGIN is at b. */
#define BC_CHILDREN(v, b, i) for (size_t i = (b) + 6, end_##i = (size_t)(v)[(b) + 3] - 1; i < end_##i; i = bc_next(v, i))

/* Whether the child at i of a MODULE_STRTAB is an entry (MST_CODE_ENTRY: the module id, then the path's
   characters), as bitcode.Strtab and shardkey._modules tell one. */
static inline int bc_is_entry(const uint64_t *v, size_t i) {
    return !BC_IS_BEGIN(v, i) && v[i + 1] == MST_ENTRY && BC_COUNT(v, i) >= 2;
}

/* Room in t, at once, for about the text the block whose BEGIN is at b makes: 4 bytes for a byte
   of the block (a GUID, 8 bytes in the stream, is up to 20 digits), since each growth of a text
   copies it. Only a guess: without the room, the text grows as it goes. */
static void bc_text_expect(bc_text *t, const uint64_t *v, size_t b) {
    uint64_t bytes = (v[b + 5] - v[b + 4]) / 8;
    if (t->failed || bytes > (SIZE_MAX / 4 - t->n) / 4 || 4 * bytes <= t->cap - t->n)
        return;
    char *p = realloc(t->p, t->n + 4 * (size_t)bytes);
    if (p) {
        t->p = p;
        t->cap = t->n + 4 * (size_t)bytes;
    }
}

static void bc_pad(bc_text *t, unsigned depth) {
    for (unsigned k = 0; k < depth; k++)
        bc_put(t, "  ", 2);
}

/* Node.lines: the block at b as text, indented by depth, BLOCKINFO blocks left out. */
static void bc_block_lines(const uint64_t *v, size_t b, unsigned depth, bc_text *t) {
    bc_pad(t, depth);
    bc_puts(t, "block ");
    bc_putu(t, v[b + 1]);
    bc_put(t, "\n", 1);
    BC_CHILDREN(v, b, i) {
        if (BC_IS_BEGIN(v, i)) {
            if (v[i + 1] != BC_BLOCKINFO)
                bc_block_lines(v, i, depth + 1, t);
        } else {
            bc_pad(t, depth);
            bc_puts(t, "  rec ");
            bc_putints(t, v + i + 1, BC_COUNT(v, i));
            bc_put(t, "\n", 1);
        }
    }
    bc_pad(t, depth);
    bc_puts(t, "end ");
    bc_putu(t, v[b + 1]);
    bc_put(t, "\n", 1);
}

/* A MODULE_STRTAB entry: its path in paths, its hash words in hashes. */
typedef struct {
    uint64_t modid;
    size_t path, npath, hash, nhash, order;
    int shared; /* another entry has the same hash */
    const char *paths;
    const uint64_t *hashes;
} bc_entry;

typedef struct {
    uint64_t modid, rank; /* modid first: bc_find */
} bc_rank;

/* Why a read of a shard's text or of a module's facts stopped: BadBitcode's message (BC_BAD),
   or why what it reads cannot be told (BC_UNKNOWN: a summary block that goes in raw, an
   interface that is not known). */
typedef struct {
    bc_text why;
    char message[96];
} bc_fault;

static int bc_bad(bc_fault *f, const char *msg) {
    snprintf(f->message, sizeof f->message, "%s", msg);
    return BC_BAD;
}

/* BC_UNKNOWN, `why` made of before, the number *x (if x), after. */
static int bc_why(bc_fault *f, const char *before, const uint64_t *x, const char *after) {
    f->why.n = 0;
    bc_puts(&f->why, before);
    if (x)
        bc_putu(&f->why, *x);
    bc_puts(&f->why, after);
    return BC_UNKNOWN;
}

/* A summary's canonical text (in bc_shard.groups_text) and its place in the order. */
typedef struct {
    uint64_t guid, rank;
    size_t at, n;
    const char *text;
} bc_group;

typedef struct {
    const uint64_t *v;
    const bc_shard_tables *tables;
    const bc_shard_env *env;
    bc_fault fault; /* why: a summary block's reason to go in raw */
    /* the MODULE_STRTAB of the module block being read */
    bc_entry *entries;
    size_t nentries, capentries;
    bc_text paths;
    bc_u64s hashes;
    bc_rank *ranks; /* by module id */
    int has_self;
    size_t self_rank;
} bc_shard;


/* Entries in path order (bytes, a path before those it begins), one path's in MODULE_STRTAB order. */
static inline int bc_entry_less(const bc_entry *x, const bc_entry *y) {
    size_t n = x->npath < y->npath ? x->npath : y->npath;
    int c = n ? memcmp(x->paths + x->path, y->paths + y->path, n) : 0;
    if (c)
        return c < 0;
    if (x->npath != y->npath)
        return x->npath < y->npath;
    return x->order < y->order;
}

BC_SORT(bc_sort_entries, bc_entry, bc_entry_less)

/* By module id (then rank, which no two share: a module id given twice is refused after). */
static inline int bc_rank_less(const bc_rank *x, const bc_rank *y) {
    return x->modid != y->modid ? x->modid < y->modid : x->rank < y->rank;
}

BC_SORT(bc_sort_ranks, bc_rank, bc_rank_less)

/* Recorded hashes compared: their lengths, then their words. 0 when equal. */
static inline int bc_hash_cmp(const bc_entry *x, const bc_entry *y) {
    if (x->nhash != y->nhash)
        return x->nhash < y->nhash ? -1 : 1;
    for (size_t k = 0; k < x->nhash; k++)
        if (x->hashes[x->hash + k] != y->hashes[y->hash + k])
            return x->hashes[x->hash + k] < y->hashes[y->hash + k] ? -1 : 1;
    return 0;
}

/* An entry with a mix of its recorded hash (its length and words), which equal hashes share. */
typedef struct {
    uint64_t mix;
    bc_entry *e;
} bc_hashed;

static uint64_t bc_hash_mix(const bc_entry *x) {
    uint64_t h = x->nhash * 0x9E3779B97F4A7C15ULL;
    for (size_t k = 0; k < x->nhash; k++) {
        h = (h ^ x->hashes[x->hash + k]) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    return h;
}

/* By mix, then recorded hash, then MODULE_STRTAB order: entries with one hash end up side by
   side (they have one mix), which is all this order is for; the mix spares most comparisons
   the walk through both entries' words. */
static inline int bc_hashed_less(const bc_hashed *x, const bc_hashed *y) {
    if (x->mix != y->mix)
        return x->mix < y->mix;
    int c = bc_hash_cmp(x->e, y->e);
    return c ? c < 0 : x->e->order < y->e->order;
}

BC_SORT(bc_sort_by_hash, bc_hashed, bc_hashed_less)

/* Summaries in (GUID, module rank) order, then by their texts' bytes. */
static inline int bc_group_less(const bc_group *x, const bc_group *y) {
    if (x->guid != y->guid)
        return x->guid < y->guid;
    if (x->rank != y->rank)
        return x->rank < y->rank;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = n ? memcmp(x->text, y->text, n) : 0;
    if (c)
        return c < 0;
    return x->n < y->n;
}

BC_SORT(bc_sort_groups, bc_group, bc_group_less)

static void bc_shard_modules_free(bc_shard *s) {
    free(s->entries);
    s->entries = NULL;
    s->nentries = s->capentries = 0;
    bc_text_free(&s->paths);
    free(s->hashes.v);
    memset(&s->hashes, 0, sizeof s->hashes);
    free(s->ranks);
    s->ranks = NULL;
}

/* The rank of a module id, or -1. */
static int bc_rank_of(const bc_shard *s, uint64_t modid, uint64_t *rank) {
    size_t k = bc_find(s->ranks, s->nentries, sizeof *s->ranks, modid);
    if (k == s->nentries)
        return -1;
    *rank = s->ranks[k].rank;
    return 0;
}

/* _modules: the MODULE_STRTAB at b read into s (entries in path order, ranks, own rank), what it
   holds besides entries and hashes as raw lines. */
static int bc_modules(bc_shard *s, size_t b, const uint8_t *own, size_t nown, int has_own, bc_text *raw) {
    const uint64_t *v = s->v;
    BC_CHILDREN(v, b, i) {
        size_t n = BC_COUNT(v, i);
        if (BC_IS_BEGIN(v, i)) {
            bc_puts(raw, "block ");
            bc_putu(raw, v[i + 1]);
            bc_puts(raw, " inside MODULE_STRTAB\n");
        } else if (bc_is_entry(v, i)) {
            void *grown = s->entries;
            if (bc_grow(&grown, s->nentries, &s->capentries, sizeof(bc_entry), 64))
                return BC_NOMEM;
            s->entries = grown;
            bc_entry *e = &s->entries[s->nentries];
            memset(e, 0, sizeof *e);
            e->modid = v[i + 2];
            e->path = s->paths.n;
            e->npath = n - 2;
            e->hash = s->hashes.n;
            e->order = s->nentries++;
            for (size_t k = 0; k < n - 2; k++)
                if (v[i + 3 + k] > 255)
                    return bc_bad(&s->fault, "a character above 255 in a string");
            /* the characters written in place, not put one at a time (a shard names hundreds) */
            if (n > 2 && !bc_room(&s->paths, n - 2)) {
                char *to = s->paths.p + s->paths.n;
                for (size_t k = 0; k < n - 2; k++)
                    to[k] = (char)v[i + 3 + k];
                s->paths.n += n - 2;
            }
        } else if (v[i + 1] == MST_HASH && s->nentries) {
            if (n > 1) { /* (a hash record of no words leaves hashes.v unallocated: no memcpy to it) */
                if (bc_reserve(&s->hashes, n - 1))
                    return BC_NOMEM;
                memcpy(s->hashes.v + s->hashes.n, v + i + 2, (n - 1) * sizeof(uint64_t));
                s->hashes.n += n - 1;
                s->entries[s->nentries - 1].nhash += n - 1;
            }
        } else {
            bc_puts(raw, "raw ");
            bc_putints(raw, v + i + 1, n);
            bc_put(raw, "\n", 1);
        }
    }
    if (s->paths.failed)
        return BC_NOMEM;
    size_t n = s->nentries;
    for (size_t r = 0; r < n; r++) {
        s->entries[r].paths = s->paths.p;
        s->entries[r].hashes = s->hashes.v;
    }
    s->ranks = malloc((n ? n : 1) * sizeof(bc_rank));
    bc_hashed *by_hash = malloc((n ? n : 1) * sizeof(bc_hashed));
    if (!s->ranks || !by_hash || bc_sort_entries(s->entries, n)) {
        free(by_hash);
        return BC_NOMEM;
    }
    s->has_self = 0;
    for (size_t r = 0; r < n; r++) {
        s->ranks[r].modid = s->entries[r].modid;
        s->ranks[r].rank = r;
        by_hash[r].e = &s->entries[r];
        by_hash[r].mix = bc_hash_mix(&s->entries[r]);
        if (has_own && !s->has_self && s->entries[r].npath == nown &&
            (nown == 0 || memcmp(s->paths.p + s->entries[r].path, own, nown) == 0)) {
            s->has_self = 1;
            s->self_rank = r;
        }
    }
    if (bc_sort_ranks(s->ranks, n)) {
        free(by_hash);
        return BC_NOMEM;
    }
    for (size_t r = 1; r < n; r++)
        if (s->ranks[r].modid == s->ranks[r - 1].modid) {
            free(by_hash);
            return bc_bad(&s->fault, "two modules with one id");
        }
    /* A hash shared by two entries: its modules go in by their bytes. */
    if (bc_sort_by_hash(by_hash, n)) {
        free(by_hash);
        return BC_NOMEM;
    }
    for (size_t r = 1; r < n; r++)
        if (by_hash[r - 1].mix == by_hash[r].mix && bc_hash_cmp(by_hash[r - 1].e, by_hash[r].e) == 0)
            by_hash[r - 1].e->shared = by_hash[r].e->shared = 1;
    free(by_hash);
    return BC_OK;
}

/* Value id -> GUID: (value id, GUID) sorted by value id, looked up by bc_find (a hash table's
   worst case is a stream's to choose). */
typedef struct {
    uint64_t vid, guid; /* vid first: bc_find */
    size_t at, n;       /* the GUID in decimal: text[at:at + n] of its bc_guids */
} bc_vguid;

/* Each GUID is written out once (bc_guids_text) and copied where it is named: a summary block
   names its GUIDs several times each (the list of them, each summary's own, refs and calls). */
typedef struct {
    bc_vguid *v;
    size_t n;
    bc_text text;
} bc_guids;

/* The GUIDs of m->v in decimal, into m->text; BC_OK or BC_NOMEM. */
static int bc_guids_text(bc_guids *m) {
    for (size_t k = 0; k < m->n; k++) {
        m->v[k].at = m->text.n;
        bc_putu(&m->text, m->v[k].guid);
        m->v[k].n = m->text.n - m->v[k].at;
    }
    return m->text.failed ? BC_NOMEM : BC_OK;
}

/* By value id (then GUID: two records of one value id refuse the block, whatever their order). */
static inline int bc_vguid_less(const bc_vguid *x, const bc_vguid *y) {
    return x->vid != y->vid ? x->vid < y->vid : x->guid < y->guid;
}

BC_SORT(bc_sort_vguids, bc_vguid, bc_vguid_less)

/* v[0:n] sorted by value id: in one pass, each pair put in its id's place, when the ids are
   first, first + 1, ... each once (as LLVM numbers a shard's values), else by bc_sort_vguids.
   BC_OK or BC_NOMEM. */
static int bc_order_vguids(bc_vguid *v, size_t n) {
    if (n < 2)
        return BC_OK;
    uint64_t first = v[0].vid, last = v[0].vid;
    for (size_t k = 1; k < n; k++) {
        first = v[k].vid < first ? v[k].vid : first;
        last = v[k].vid > last ? v[k].vid : last;
    }
    if (last - first != n - 1)
        return bc_sort_vguids(v, n);
    bc_vguid *to = malloc(n * sizeof *to);
    unsigned char *seen = calloc(n, 1);
    int placed = to && seen;
    for (size_t k = 0; placed && k < n; k++) {
        size_t at = (size_t)(v[k].vid - first);
        placed = !seen[at]; /* a value id given twice: some id between is missing */
        seen[at] = 1;
        to[at] = v[k];
    }
    if (placed)
        memcpy(v, to, n * sizeof *v);
    int e = !to || !seen ? BC_NOMEM : placed ? BC_OK : bc_sort_vguids(v, n);
    free(to);
    free(seen);
    return e;
}

static int bc_guid_of(const bc_guids *m, uint64_t vid, uint64_t *guid) {
    size_t k = bc_find(m->v, m->n, sizeof *m->v, vid);
    if (k == m->n)
        return -1;
    *guid = m->v[k].guid;
    return 0;
}

/* `@<guid>` of a value id (_Summaries._v), or BC_UNKNOWN. */
static int bc_put_value(bc_shard *s, const bc_guids *m, uint64_t vid, bc_text *t) {
    size_t k = bc_find(m->v, m->n, sizeof *m->v, vid);
    if (k == m->n)
        return bc_why(&s->fault, "value id ", &vid, " without a GUID");
    bc_put(t, "@", 1);
    bc_put(t, m->text.p + m->v[k].at, m->v[k].n);
    return BC_OK;
}

/* `^<rank>` of a module id (_Summaries._m), or BC_UNKNOWN. */
static int bc_put_module(bc_shard *s, uint64_t modid, bc_text *t) {
    uint64_t r;
    if (bc_rank_of(s, modid, &r))
        return bc_why(&s->fault, "module id ", &modid, " not in MODULE_STRTAB");
    bc_put(t, "^", 1);
    bc_putu(t, r);
    return BC_OK;
}

static int bc_put_values(bc_shard *s, const bc_guids *m, const uint64_t *vids, size_t n, bc_text *t) {
    for (size_t k = 0; k < n; k++) {
        if (k)
            bc_put(t, " ", 1);
        CHECK(bc_put_value(s, m, vids[k], t));
    }
    return BC_OK;
}

/* _Summaries._summary: the record r[0:n] of a function, variable or alias as its text, in the
   order Python evaluates it (which value id is reported unknown first). */
static int bc_summary(bc_shard *s, const bc_guids *m, const uint64_t *r, size_t n, bc_text *t, bc_text *edges) {
    uint64_t code = r[0];
    if (code == FS_COMBINED || code == FS_COMBINED_PROFILE) {
        if (n < 10 || r[7] > n - 10)
            return bc_why(&s->fault, "short function record", NULL, "");
        const uint64_t *refs = r + 10, *calls = r + 10 + r[7];
        size_t nrefs = (size_t)r[7], ncalls = n - 10 - nrefs;
        edges->n = 0;
        if (code == FS_COMBINED_PROFILE) {
            if (ncalls % 2)
                return bc_why(&s->fault, "odd call list", NULL, "");
            for (size_t k = 0; k < ncalls; k += 2) {
                if (k)
                    bc_put(edges, " ", 1);
                CHECK(bc_put_value(s, m, calls[k], edges));
                bc_put(edges, ":", 1);
                bc_putu(edges, calls[k + 1]);
            }
        } else {
            CHECK(bc_put_values(s, m, calls, ncalls, edges));
        }
        bc_puts(t, "fn");
        bc_putu(t, code);
        bc_put(t, " ", 1);
        CHECK(bc_put_value(s, m, r[1], t));
        bc_put(t, " ", 1);
        CHECK(bc_put_module(s, r[2], t));
        bc_put(t, " ", 1);
        bc_putints(t, r + 3, 7);
        bc_puts(t, " refs ");
        CHECK(bc_put_values(s, m, refs, nrefs, t));
        bc_puts(t, " calls ");
        if (edges->failed)
            return BC_NOMEM;
        bc_put(t, edges->p, edges->n);
    } else if (code == FS_COMBINED_VAR) {
        if (n < 5)
            return bc_why(&s->fault, "short variable record", NULL, "");
        bc_puts(t, "var ");
        CHECK(bc_put_value(s, m, r[1], t));
        bc_put(t, " ", 1);
        CHECK(bc_put_module(s, r[2], t));
        bc_put(t, " ", 1);
        bc_putints(t, r + 3, 2);
        bc_puts(t, " refs ");
        CHECK(bc_put_values(s, m, r + 5, n - 5, t));
    } else if (code == FS_COMBINED_ALIAS) {
        if (n != 5)
            return bc_why(&s->fault, "alias record layout", NULL, "");
        bc_puts(t, "alias ");
        CHECK(bc_put_value(s, m, r[1], t));
        bc_put(t, " ", 1);
        CHECK(bc_put_module(s, r[2], t));
        bc_put(t, " ", 1);
        bc_putu(t, r[3]);
        bc_put(t, " ", 1);
        if (r[4])
            CHECK(bc_put_value(s, m, r[4], t));
        else
            bc_puts(t, "none");
    } else {
        return bc_why(&s->fault, "record ", &code, "");
    }
    return BC_OK;
}

typedef struct {
    bc_guids guids;
    uint64_t *sorted; /* the GUIDs, in order */
    bc_group *groups;
    size_t ngroups, capgroups;
    bc_text groups_text, plain, prefix, edges;
} bc_summary_state;

static void bc_summary_state_free(bc_summary_state *u) {
    free(u->guids.v);
    bc_text_free(&u->guids.text);
    free(u->sorted);
    free(u->groups);
    bc_text_free(&u->groups_text);
    bc_text_free(&u->plain);
    bc_text_free(&u->prefix);
    bc_text_free(&u->edges);
}

/* _Summaries and its lines(): the summary block at b as its canonical lines appended to out, and
   in *full (when the version says which) the ranks of the modules the backend imports
   definitions from. BC_UNKNOWN, s->fault.why saying why, for a block that goes in raw. */
static int bc_summaries_with(bc_shard *s, bc_summary_state *u, size_t b, bc_text *out, unsigned char **full) {
    const uint64_t *v = s->v;
    const bc_shard_tables *tb = s->tables;
    size_t nguids = 0, nversions = 0;
    uint64_t version = 0;
    BC_CHILDREN(v, b, i) {
        if (BC_IS_BEGIN(v, i))
            return bc_why(&s->fault, "block ", &v[i + 1], "");
    }
    bc_text_expect(&u->groups_text, v, b);
    BC_CHILDREN(v, b, i) {
        nguids += v[i + 1] == FS_VALUE_GUID;
        if (v[i + 1] == FS_VERSION && BC_COUNT(v, i) == 2) {
            nversions++;
            version = v[i + 2];
        }
    }
    if (nversions != 1 || !bc_in(&tb->known, version)) { /* "summary version [a, b]", a Python list */
        s->fault.why.n = 0;
        bc_puts(&s->fault.why, "summary version [");
        size_t k = 0;
        BC_CHILDREN(v, b, i) {
            if (v[i + 1] == FS_VERSION && BC_COUNT(v, i) == 2) {
                if (k++)
                    bc_puts(&s->fault.why, ", ");
                bc_putu(&s->fault.why, v[i + 2]);
            }
        }
        bc_puts(&s->fault.why, "]");
        return BC_UNKNOWN;
    }
    /* _guids: the first record that is refused says why, a bad layout or a value id given twice
       (or 0), as the Python loop meets them in order. The records are read up to the first of a
       bad layout: a value id given twice among them comes before it. */
    u->guids.v = malloc((nguids ? nguids : 1) * sizeof(bc_vguid));
    u->sorted = malloc((nguids ? nguids : 1) * sizeof(uint64_t));
    if (!u->guids.v || !u->sorted)
        return BC_NOMEM;
    size_t ng = 0;
    int split = version >= tb->split_since, bad_layout = 0, twice = 0;
    BC_CHILDREN(v, b, i) {
        if (v[i + 1] != FS_VALUE_GUID)
            continue;
        size_t n = BC_COUNT(v, i);
        uint64_t g;
        if (!split && n == 3) {
            g = v[i + 3];
        } else if (split && n == 4) {
            if (v[i + 3] >> 32 || v[i + 4] >> 32)
                return BC_DEFER; /* a GUID above 2**64: Python's ints */
            g = (v[i + 3] << 32) | v[i + 4];
        } else {
            bad_layout = 1;
            break;
        }
        twice |= v[i + 2] == 0;
        u->guids.v[ng].vid = v[i + 2];
        u->guids.v[ng].guid = g;
        u->sorted[ng++] = g; /* in record order: LLVM's, which is the GUIDs' */
    }
    if (bc_order_vguids(u->guids.v, ng))
        return BC_NOMEM;
    for (size_t j = 1; j < ng; j++)
        twice |= u->guids.v[j].vid == u->guids.v[j - 1].vid;
    if (twice)
        return bc_why(&s->fault, "value id given twice", NULL, "");
    if (bad_layout)
        return bc_why(&s->fault, "VALUE_GUID layout", NULL, "");
    u->guids.n = ng;
    if (bc_sort_u64s(u->sorted, ng))
        return BC_NOMEM;
    for (size_t j = 1; j < ng; j++)
        if (u->sorted[j] == u->sorted[j - 1])
            return bc_why(&s->fault, "a GUID under two value ids", NULL, "");
    CHECK(bc_guids_text(&u->guids));
    /* In value id order the GUIDs are in their own order too when LLVM numbers them so (it
       writes the VALUE_GUID records in GUID order, ids counting up): their list is then the
       decimal texts one after another. */
    int in_order = 1;
    for (size_t j = 1; j < ng && in_order; j++)
        in_order = u->guids.v[j - 1].guid < u->guids.v[j].guid;
    /* lines() */
    int last_is_group = 0; /* the record before this one made the last summary */
    BC_CHILDREN(v, b, i) {
        const uint64_t *r = v + i + 1;
        size_t n = BC_COUNT(v, i);
        uint64_t code = r[0];
        if (code == FS_VALUE_GUID)
            continue;
        if (code >= FS_TYPE_TESTS && code <= FS_TYPE_CHECKED_LOAD_CONST_VCALL) {
            bc_puts(&u->prefix, "\n  pre ");
            bc_putints(&u->prefix, r, n);
        } else if (code == FS_VERSION || code == FS_FLAGS || code == FS_CFI_DEFS || code == FS_CFI_DECLS ||
                   code == FS_TYPE_ID) {
            bc_puts(&u->plain, "rec ");
            bc_putints(&u->plain, r, n);
            bc_put(&u->plain, "\n", 1);
        } else if (code == FS_BLOCK_COUNT) {
            int read = 1;
            if (s->env->block_count_read)
                CHECK(s->env->block_count_read(s->env->ctx, &read));
            if (read) {
                bc_puts(&u->plain, "rec ");
                bc_putints(&u->plain, r, n);
            } else {
                bc_puts(&u->plain, tb->unread_line);
            }
            bc_put(&u->plain, "\n", 1);
        } else if (code == FS_ORIGINAL_NAME) {
            if (!u->ngroups || !last_is_group || n != 2 || u->prefix.n)
                return bc_why(&s->fault, "an original name that does not follow a summary", NULL, "");
            /* the last summary's text is the tail of groups_text */
            size_t at = u->groups_text.n;
            bc_puts(&u->groups_text, "\n  origname ");
            bc_putu(&u->groups_text, r[1]);
            u->groups[u->ngroups - 1].n += u->groups_text.n - at;
        } else {
            if (u->prefix.n && code != FS_COMBINED && code != FS_COMBINED_PROFILE)
                return bc_why(&s->fault, "type tests before a record that is not a function's", NULL, "");
            void *grown = u->groups;
            if (bc_grow(&grown, u->ngroups, &u->capgroups, sizeof(bc_group), 64))
                return BC_NOMEM;
            u->groups = grown;
            size_t at = u->groups_text.n;
            CHECK(bc_summary(s, &u->guids, r, n, &u->groups_text, &u->edges));
            if (u->prefix.failed)
                return BC_NOMEM;
            bc_put(&u->groups_text, u->prefix.p, u->prefix.n);
            u->prefix.n = 0;
            bc_group *g = &u->groups[u->ngroups++];
            bc_guid_of(&u->guids, r[1], &g->guid); /* both found: bc_summary read them */
            bc_rank_of(s, r[2], &g->rank);
            g->at = at;
            g->n = u->groups_text.n - at;
            last_is_group = 1;
            continue;
        }
        last_is_group = 0;
    }
    if (u->prefix.n)
        return bc_why(&s->fault, "type tests at the end of the block", NULL, "");
    if (u->groups_text.failed || u->plain.failed || u->prefix.failed || u->edges.failed)
        return BC_NOMEM;
    for (size_t k = 0; k < u->ngroups; k++)
        u->groups[k].text = u->groups_text.p + u->groups[k].at;
    if (bc_sort_groups(u->groups, u->ngroups))
        return BC_NOMEM;
    bc_puts(out, "summaries v");
    bc_putu(out, version);
    bc_put(out, "\n", 1);
    bc_put(out, u->plain.p, u->plain.n);
    bc_puts(out, "guids ");
    if (in_order) {
        for (size_t k = 0; k < ng; k++) {
            if (k)
                bc_put(out, " ", 1);
            bc_put(out, u->guids.text.p + u->guids.v[k].at, u->guids.v[k].n);
        }
    } else {
        bc_putints(out, u->sorted, ng);
    }
    bc_put(out, "\n", 1);
    for (size_t k = 0; k < u->ngroups; k++) {
        bc_put(out, u->groups[k].text, u->groups[k].n);
        bc_put(out, "\n", 1);
    }
    /* definition_ranks */
    if (bc_in(&tb->declaration, version)) {
        *full = calloc(s->nentries ? s->nentries : 1, 1);
        if (!*full)
            return BC_NOMEM;
        BC_CHILDREN(v, b, i) {
            const uint64_t *r = v + i + 1;
            uint64_t rank;
            if ((r[0] == FS_COMBINED || r[0] == FS_COMBINED_PROFILE || r[0] == FS_COMBINED_VAR ||
                 r[0] == FS_COMBINED_ALIAS) && BC_COUNT(v, i) > 3 && !(r[3] & BC_IMPORT_AS_DECLARATION) &&
                bc_rank_of(s, r[2], &rank) == 0)
                (*full)[rank] = 1;
        }
    }
    return BC_OK;
}

static int bc_summaries(bc_shard *s, size_t b, bc_text *out, unsigned char **full) {
    bc_summary_state u;
    memset(&u, 0, sizeof u);
    int e = bc_summaries_with(s, &u, b, out, full);
    bc_summary_state_free(&u);
    return e;
}

/* _module_block: the MODULE_BLOCK at b as its lines appended to out. */
static int bc_module_block(bc_shard *s, size_t b, const uint8_t *own, size_t nown, int has_own, bc_text *out) {
    const uint64_t *v = s->v;
    size_t strtab = 0, nstrtabs = 0;
    BC_CHILDREN(v, b, i) {
        if (BC_IS_BEGIN(v, i) && v[i + 1] == BC_MODULE_STRTAB) {
            strtab = i;
            nstrtabs++;
        }
    }
    if (nstrtabs != 1) {
        snprintf(s->fault.message, sizeof s->fault.message, "%zu MODULE_STRTAB blocks", nstrtabs);
        return BC_BAD;
    }
    bc_text raw = {0}, body = {0};
    bc_text_expect(&body, v, b);
    bc_text_expect(out, v, b);
    unsigned char *full = NULL;
    int e = bc_modules(s, strtab, own, nown, has_own, &raw);
    size_t at = 0; /* where in body the modules' lines go */
    int summaries = 0;
    if (e)
        goto done;
    BC_CHILDREN(v, b, i) {
        if (!BC_IS_BEGIN(v, i)) {
            bc_puts(&body, "rec ");
            bc_putints(&body, v + i + 1, BC_COUNT(v, i));
            bc_put(&body, "\n", 1);
        } else if (v[i + 1] == BC_MODULE_STRTAB) {
            at = body.n;
        } else if (v[i + 1] == BC_SUMMARY) {
            if (summaries++) {
                e = bc_bad(&s->fault, "two summary blocks");
                goto done;
            }
            e = bc_summaries(s, i, &body, &full);
            if (e == BC_UNKNOWN) { /* raw, numbering and all; module ids with their ranks */
                free(full);
                full = NULL;
                if (s->fault.why.failed) {
                    e = BC_NOMEM;
                    goto done;
                }
                bc_puts(&body, "summaries raw (");
                bc_put(&body, s->fault.why.p, s->fault.why.n);
                bc_puts(&body, ")\nmodids ");
                for (size_t k = 0; k < s->nentries; k++) {
                    if (k)
                        bc_put(&body, " ", 1);
                    bc_putu(&body, s->ranks[k].modid);
                    bc_puts(&body, "=^");
                    bc_putu(&body, s->ranks[k].rank);
                }
                bc_put(&body, "\n", 1);
                bc_block_lines(v, i, 1, &body);
                e = BC_OK;
            } else if (e) {
                goto done;
            }
        } else if (v[i + 1] != BC_BLOCKINFO) {
            bc_block_lines(v, i, 1, &body);
        }
    }
    if (body.failed || raw.failed) {
        e = BC_NOMEM;
        goto done;
    }
    bc_puts(out, "block 8\n");
    bc_put(out, body.p, at);
    /* _Modules.lines */
    for (size_t r = 0; r < s->nentries; r++) {
        const bc_entry *en = &s->entries[r];
        int by_bytes = !full || !s->env->has_interface || full[r] || (s->has_self && r == s->self_rank) || en->shared;
        bc_puts(out, "module ^");
        bc_putu(out, r);
        bc_puts(out, by_bytes ? " " : " declarations ");
        e = s->env->name(s->env->ctx, !by_bytes, (const uint8_t *)s->paths.p + en->path, en->npath, out);
        if (e)
            goto done;
        if (by_bytes) {
            bc_puts(out, " hash ");
            bc_putints(out, s->hashes.v + en->hash, en->nhash);
        }
        bc_put(out, "\n", 1);
    }
    if (has_own) {
        bc_puts(out, "self ");
        if (s->has_self) {
            bc_put(out, "^", 1);
            bc_putu(out, s->self_rank);
        } else {
            bc_put(out, "?", 1);
        }
        bc_put(out, "\n", 1);
    }
    bc_put(out, raw.p, raw.n);
    bc_put(out, body.p + at, body.n - at);
    bc_puts(out, "end 8\n");
done:
    free(full);
    bc_text_free(&raw);
    bc_text_free(&body);
    bc_shard_modules_free(s);
    return e;
}

/* canonical: the events of a shard's whole read (bc_read under Want(), in ev, whose BEGIN words
   this changes: bc_index_ends) as its canonical text in out. BC_OK; BC_BAD with why in error;
   BC_CALLBACK, BC_DEFER or BC_NOMEM. own: the backend's own module's path (has_own). */
static int bc_shard_text(bc_u64s *ev, const bc_shard_tables *tables, const bc_shard_env *env, const uint8_t *own,
                         size_t nown, int has_own, bc_text *out, char *error, size_t error_size) {
    bc_shard s;
    memset(&s, 0, sizeof s);
    s.v = ev->v;
    s.tables = tables;
    s.env = env;
    error[0] = 0;
    if (bc_index_ends(ev)) {
        snprintf(error, error_size, "events that do not nest");
        return BC_BAD;
    }
    const uint64_t *v = ev->v;
    size_t found = 0;
    int e = BC_OK;
    bc_puts(out, tables->format);
    bc_put(out, "\n", 1);
    for (size_t i = 0; i < ev->n && !e; i = bc_next(v, i)) {
        if (!BC_IS_BEGIN(v, i)) {
            bc_puts(out, "rec ");
            bc_putints(out, v + i + 1, BC_COUNT(v, i));
            bc_put(out, "\n", 1);
        } else if (v[i + 1] == BC_MODULE) {
            found++;
            e = bc_module_block(&s, i, own, nown, has_own, out);
        } else if (v[i + 1] != BC_BLOCKINFO) {
            bc_block_lines(v, i, 0, out);
        }
    }
    if (!e && found != 1) {
        snprintf(s.fault.message, sizeof s.fault.message, "%zu MODULE_BLOCKs in an index shard", found);
        e = BC_BAD;
    }
    if (!e && out->failed)
        e = BC_NOMEM;
    if (e == BC_BAD)
        snprintf(error, error_size, "%s", s.fault.message);
    bc_text_free(&s.fault.why);
    bc_shard_modules_free(&s);
    return e;
}

/* --- a shard's module paths, relocated ---------------------------------------------------------------

   bitcode.Strtab, rule for rule (StrtabPython the reference; tests/test_strtab_native.py holds the
   two to the same paths, the same bytes and the same BadBitcode): the one MODULE_STRTAB among the
   blocks a read under bitcode._STRTAB_WANT keeps, its entries' paths, and the stream with that
   block written again to name other paths. A length word that would not fit in 32 bits answers
   BC_DEFER: the Python one raises there. */

/* Where a stream's MODULE_STRTAB is, in its events (after bc_index_ends): its BEGIN, and the BEGINs of
   the blocks around it, outermost first; how many MODULE_STRTAB blocks there are, and its entries. */
typedef struct {
    size_t found, b, around[BC_MAX_DEPTH + 2], naround, entries;
} bc_strtab;

/* Strtab.of's find: the MODULE_STRTAB blocks among the events from i to `to`, in stream order (a
   block before those inside it); around[0:depth] the BEGINs of the blocks they are in. Events nest
   no deeper than bc_index_ends lets them, so `around` has room. */
static void bc_strtab_find(const uint64_t *v, size_t i, size_t to, size_t *around, size_t depth, bc_strtab *st) {
    for (; i < to; i = bc_next(v, i)) {
        if (!BC_IS_BEGIN(v, i))
            continue;
        if (v[i + 1] == BC_MODULE_STRTAB && st->found++ == 0) {
            st->b = i;
            memcpy(st->around, around, depth * sizeof *around);
            st->naround = depth;
        }
        around[depth] = i;
        bc_strtab_find(v, i + 6, (size_t)v[i + 3] - 1, around, depth + 1, st);
    }
}

/* Strtab.of: the stream read as `want` says (bitcode._STRTAB_WANT) into ev, whose BEGIN words this
   changes (bc_index_ends), and its MODULE_STRTAB found in st. BC_OK; BC_BAD with why in error (the
   read's, two MODULE_STRTAB blocks, a path's character above 255); BC_NOMEM. ev is the caller's to
   free, whatever the answer. */
static int bc_strtab_read(const uint8_t *data, size_t len, const bc_want *want, bc_u64s *ev, bc_strtab *st,
                          char *error, size_t error_size) {
    memset(st, 0, sizeof *st);
    int e = bc_read(data, len, want, ev, error, error_size);
    if (e)
        return e;
    if (bc_index_ends(ev)) {
        snprintf(error, error_size, "events that do not nest");
        return BC_BAD;
    }
    size_t around[BC_MAX_DEPTH + 2];
    bc_strtab_find(ev->v, 0, ev->n, around, 0, st);
    if (st->found > 1) {
        snprintf(error, error_size, "two MODULE_STRTAB blocks");
        return BC_BAD;
    }
    if (!st->found)
        return BC_OK;
    const uint64_t *v = ev->v;
    BC_CHILDREN(v, st->b, i) {
        if (!bc_is_entry(v, i))
            continue;
        st->entries++;
        for (size_t k = 3; k <= BC_COUNT(v, i); k++) /* the path: the fields after the module id */
            if (v[i + k] > 255) {
                snprintf(error, error_size, "a character above 255 in a string");
                return BC_BAD;
            }
    }
    return BC_OK;
}

/* Bits appended to a bc_text, least significant first, as bitcode._Writer packs them: fields of up to
   32 bits go into acc, whole 32-bit words leave it as they fill. */
typedef struct {
    bc_text *t;
    uint64_t acc;
    unsigned n; /* the bits in acc, fewer than 32 between calls */
} bc_bits;

static inline void bc_bits_word(bc_bits *w) {
    uint8_t b[4] = {(uint8_t)w->acc, (uint8_t)(w->acc >> 8), (uint8_t)(w->acc >> 16), (uint8_t)(w->acc >> 24)};
    bc_put(w->t, b, 4);
    w->acc >>= 32;
}

/* _Writer.fixed: x, below 2**n, as n <= 32 bits. */
static inline void bc_bits_fixed(bc_bits *w, uint64_t x, unsigned n) {
    w->acc |= x << w->n;
    w->n += n;
    if (w->n >= 32) {
        bc_bits_word(w);
        w->n -= 32;
    }
}

/* _Writer.vbr: x as n-bit chunks, 2 <= n <= 32. */
static inline void bc_bits_vbr(bc_bits *w, uint64_t x, unsigned n) {
    uint64_t hi = (uint64_t)1 << (n - 1);
    for (; x >= hi; x >>= n - 1)
        bc_bits_fixed(w, (x & (hi - 1)) | hi, n);
    bc_bits_fixed(w, x, n);
}

/* _Writer.align32: zeros to a 32-bit boundary. */
static inline void bc_bits_align32(bc_bits *w) {
    if (w->n) {
        bc_bits_word(w);
        w->acc = 0;
        w->n = 0;
    }
}

_Static_assert(OP_FIXED == 1 && OP_VBR == 2 && OP_ARRAY == 3 && OP_CHAR6 == 4 && OP_BLOB == 5,
               "an operand's kind is its encoding in DEFINE_ABBREV");

/* _Writer.abbrev: DEFINE_ABBREV of these operands, in a block whose abbreviation ids are `width` bits. */
static void bc_bits_abbrev(bc_bits *w, const bc_op *ops, size_t n, unsigned width) {
    bc_bits_fixed(w, 2, width);
    bc_bits_vbr(w, n, 5);
    for (size_t k = 0; k < n; k++) {
        if (ops[k].kind == OP_LIT) {
            bc_bits_fixed(w, 1, 1);
            bc_bits_vbr(w, ops[k].value, 8);
            continue;
        }
        bc_bits_fixed(w, 0, 1);
        bc_bits_fixed(w, (uint64_t)ops[k].kind, 3);
        if (ops[k].kind == OP_FIXED || ops[k].kind == OP_VBR)
            bc_bits_vbr(w, ops[k].value, 5);
    }
}

/* How relocate writes MODULE_STRTAB's records: bitcode._ENTRY_ABBREV (module id, path as a blob) and
   _HASH_ABBREV (the hash's 32-bit words). */
static const bc_op BC_ENTRY_ABBREV[3] = {{MST_ENTRY, OP_LIT}, {6, OP_VBR}, {0, OP_BLOB}};
static const bc_op BC_HASH_ABBREV[3] = {{MST_HASH, OP_LIT}, {0, OP_ARRAY}, {32, OP_FIXED}};

/* A new path: its bytes. */
typedef struct {
    const uint8_t *p;
    size_t n;
} bc_name;

/* Strtab.relocate: the stream bc_strtab_read read (into the events v and st) with its MODULE_STRTAB
   written again, the k-th entry naming names[k] (st->entries of them), in out; the block's
   sub-blocks are left out, as Strtab.records leaves them. Abbreviation ids narrower than 3 bits
   cannot name the two abbreviations: every record is then unabbreviated (ids narrower than 2 bits
   cannot name a record at all, so such a block has none). BC_OK; BC_BAD with why in error (no
   MODULE_STRTAB block); BC_DEFER; BC_NOMEM. */
static int bc_strtab_relocate(const uint8_t *data, size_t len, const uint64_t *v, const bc_strtab *st,
                              const bc_name *names, bc_text *out, char *error, size_t error_size) {
    error[0] = 0;
    if (!st->found) {
        snprintf(error, error_size, "no MODULE_STRTAB block");
        return BC_BAD;
    }
    size_t b = st->b;
    uint64_t width = v[b + 2], start = v[b + 4], end = v[b + 5];
    unsigned wd = (unsigned)width;
    int abbreviated = width >= 3;
    size_t head = (size_t)(start / 8), tail = (size_t)(end / 8), k = 0;
    bc_put(out, data, head);
    bc_bits w = {out, 0, 0};
    if (abbreviated) {
        bc_bits_abbrev(&w, BC_ENTRY_ABBREV, 3, wd);
        bc_bits_abbrev(&w, BC_HASH_ABBREV, 3, wd);
    }
    BC_CHILDREN(v, b, i) {
        if (BC_IS_BEGIN(v, i))
            continue;
        size_t n = BC_COUNT(v, i);
        const uint64_t *r = v + i + 1; /* the code, then the fields */
        if (bc_is_entry(v, i)) {
            const bc_name *name = &names[k++];
            if (abbreviated) { /* abbreviation 4: the module id, the path's length, its bytes */
                bc_bits_fixed(&w, 4, wd);
                bc_bits_vbr(&w, r[1], 6);
                bc_bits_vbr(&w, name->n, 6);
                bc_bits_align32(&w);
                bc_put(out, name->p, name->n);
                bc_put(out, "\0\0\0", (0 - name->n) & 3);
            } else { /* UNABBREV_RECORD: the code, the count, the module id, the path's bytes */
                bc_bits_fixed(&w, 3, wd);
                bc_bits_vbr(&w, MST_ENTRY, 6);
                bc_bits_vbr(&w, (uint64_t)name->n + 1, 6);
                bc_bits_vbr(&w, r[1], 6);
                for (size_t j = 0; j < name->n; j++)
                    bc_bits_vbr(&w, name->p[j], 6);
            }
            continue;
        }
        int fits = abbreviated && r[0] == MST_HASH && n > 1;
        for (size_t j = 1; j < n && fits; j++)
            fits = !(r[j] >> 32);
        if (fits) { /* abbreviation 5: the count, then each word as 32 bits */
            bc_bits_fixed(&w, 5, wd);
            bc_bits_vbr(&w, n - 1, 6);
            for (size_t j = 1; j < n; j++)
                bc_bits_fixed(&w, r[j], 32);
            continue;
        }
        bc_bits_fixed(&w, 3, wd); /* UNABBREV_RECORD: code, count, fields, all VBR6 */
        bc_bits_vbr(&w, r[0], 6);
        bc_bits_vbr(&w, n - 1, 6);
        for (size_t j = 1; j < n; j++)
            bc_bits_vbr(&w, r[j], 6);
    }
    bc_bits_fixed(&w, 0, wd); /* END_BLOCK */
    bc_bits_align32(&w);
    if (out->failed)
        return BC_NOMEM;
    uint64_t words = (out->n - head) / 4, old = (end - start) / 32;
    bc_put(out, data + tail, len - tail);
    if (out->failed)
        return BC_NOMEM;
    /* The length words of the blocks around it, then its own, each 32 bits before its start (enter_block),
       all in the bytes before it. */
    for (size_t a = 0; a <= st->naround; a++) {
        uint8_t *p = (uint8_t *)out->p + (v[(a < st->naround ? st->around[a] : b) + 4] - 32) / 8;
        uint64_t x = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
        if (x + words < old || x + words - old > UINT32_MAX)
            return BC_DEFER;
        x += words - old;
        for (int j = 0; j < 4; j++)
            p[j] = (uint8_t)(x >> (8 * j));
    }
    return BC_OK;
}

/* --- a module's facts --------------------------------------------------------------------------------

   formats/modulefacts.py's read_python, rule for rule, from the events of one read under
   modulefacts.WANT: the inline assembly (irmodule.asm_of), the triple and module flags
   (irmodule.facts_of), the interface text (interface.interface_of, with its second read under
   interface._WHOLE for a module it does not know) and the producer (irmodule.producer_of), each
   part's BadBitcode with the same message where the Python one raises it, in the order read_python
   meets them. Strings come out as bytes (bc_fact spans): the caller decodes them and matches the
   string table against irmodule's directive names, as the Python one does. interface.py's and
   irmodule.py's tables come from the caller (bc_facts_tables). tests/test_modulefacts_native.py
   holds the two equal. What it does not take answers BC_DEFER, and the caller runs the Python one:
   a METADATA_STRINGS record of fewer than two fields in the interface's metadata (the Python one
   fails there with an IndexError), a type whose check for a named struct walks more than
   BC_TYPE_STEPS types, a text larger than BC_TEXT_LIMIT (both only of streams made to be so). */

#define BC_CONSTANTS 11
#define BC_FUNCTION 12
#define BC_IDENTIFICATION 13
#define BC_METADATA 15
#define BC_TYPES 17
#define BC_STRTAB 23
#define BC_SYMTAB 25
#define BC_TYPE_STEPS 1000000
#define BC_TEXT_LIMIT ((size_t)1 << 28)
/* bitcodes.py's codes that the facts name. */
enum { MODULE_VERSION = 1, MODULE_TRIPLE = 2, MODULE_ASM = 4, MODULE_GLOBALVAR = 7, MODULE_FUNCTION = 8,
       MODULE_VSTOFFSET = 13, MODULE_HASH = 17 };
enum { TYPE_NUMENTRY = 1, TYPE_OPAQUE = 6, TYPE_INTEGER = 7, TYPE_ARRAY = 11, TYPE_VECTOR = 12, TYPE_STRUCT_ANON = 18,
       TYPE_STRUCT_NAME = 19, TYPE_STRUCT_NAMED = 20, TYPE_FUNCTION = 21, TYPE_OPAQUE_POINTER = 25, TYPE_TARGET = 26 };
enum { CST_SETTYPE = 1, CST_NULL = 2, CST_INTEGER = 4 };
enum { MD_VALUE = 2, MD_NODE = 3, MD_NAME = 4, MD_DISTINCT = 5, MD_KIND = 6, MD_NAMED_NODE = 10, MD_STRINGS = 35 };
enum { FUNC_DECLAREBLOCKS = 1, IDENTIFICATION_STRING = 1, STRTAB_BLOB = 1 };

/* interface.py's and irmodule.py's tables, given by the caller (one definition, in Python). */
typedef struct {
    const char *format;            /* interface: FORMAT */
    bc_set raw_blocks;             /* RAW_BLOCKS */
    bc_set passed_blocks;          /* READ_BLOCKS | DROPPED_BLOCKS | SKIPPED_BLOCKS */
    bc_set kept_codes;             /* KEPT_MODULE_CODES */
    bc_set dropped_codes;          /* DROPPED_MODULE_CODES */
    bc_set globals_read;           /* GLOBALS_READ */
    bc_set local_linkages;         /* LOCAL_LINKAGES */
    uint64_t appending;            /* APPENDING_LINKAGE */
    bc_set known_linkages;         /* KNOWN_LINKAGES */
    const uint64_t *primitive;     /* PRIMITIVE_TYPES' codes ... */
    const char *const *primitive_names; /* ... and names */
    size_t nprimitive;
    bc_set simple_constants;       /* SIMPLE_CONSTANTS */
    bc_set md_debug;               /* MD_DEBUG */
    bc_set md_known;               /* MD_KNOWN */
    uint64_t max_depth;            /* MAX_TYPE_DEPTH */
    const uint8_t *intrinsic;      /* INTRINSIC_PREFIX */
    size_t nintrinsic;
    const uint64_t *asm_codes, *asm_at; /* irmodule: INLINE_ASM */
    size_t nasm;
    bc_set md_no_id;               /* irmodule: MD_NO_ID */
    const uint8_t *module_flags;   /* irmodule: MODULE_FLAGS */
    size_t nmodule_flags;
    bc_set global_value_codes;     /* irmodule: GLOBAL_VALUE_CODES */
} bc_facts_tables;

/* A fact of the answer: a string (bytes at..at+n of bc_facts_out.bytes), a flag's value with it. */
enum { FACT_ASM, FACT_TEMPLATE, FACT_STRTAB, FACT_TRIPLE, FACT_FLAG, FACT_PRODUCER };
typedef struct {
    int kind;
    size_t at, n;
    int64_t value;
} bc_fact;

typedef struct {
    bc_text interface; /* interface_of's text */
    bc_text bytes;
    bc_fact *facts;
    size_t n, cap;
} bc_facts_out;

static void bc_facts_out_free(bc_facts_out *o) {
    bc_text_free(&o->interface);
    bc_text_free(&o->bytes);
    free(o->facts);
    memset(o, 0, sizeof *o);
}

/* A set of codes of a table, those below 64 answered from a bit mask (a metadata block asks
   of every record). */
typedef struct {
    const bc_set *set;
    uint64_t low;
} bc_codes;

static bc_codes bc_codes_of(const bc_set *set) {
    bc_codes c = {set, 0};
    for (size_t k = 0; k < set->n; k++)
        if (set->v[k] < 64)
            c.low |= (uint64_t)1 << set->v[k];
    return c;
}

static inline int bc_codes_in(const bc_codes *c, uint64_t code) {
    return code < 64 ? (int)((c->low >> code) & 1) : bc_in(c->set, code);
}

typedef struct {
    const uint64_t *v;
    size_t n;
    const bc_facts_tables *tb;
    bc_codes md_known, md_debug, md_no_id; /* tb's */
    bc_fault fault; /* why: interface._Unknown's message */
    uint64_t steps; /* left to reaches_named */
} bc_mf;


/* bitcode.record_bytes: the fields w[0:n] as bytes appended to t; BadBitcode for one above 255. */
static int bc_mf_bytes(bc_mf *f, const uint64_t *w, size_t n, bc_text *t) {
    char buf[256];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (w[i] > 255)
            return bc_bad(&f->fault, "a character above 255 in a string");
        buf[k++] = (char)w[i];
        if (k == sizeof buf) {
            bc_put(t, buf, k);
            k = 0;
        }
    }
    bc_put(t, buf, k);
    return t->failed ? BC_NOMEM : BC_OK;
}

static int bc_has_above_255(const uint64_t *w, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (w[i] > 255)
            return 1;
    return 0;
}

/* interface._name: repr(bytes)[2:-1], as CPython writes a bytes object's repr. */
static void bc_put_name(bc_text *t, const uint8_t *p, size_t n) {
    int squote = n && memchr(p, '\'', n) != NULL, dquote = n && memchr(p, '"', n) != NULL;
    unsigned char quote = squote && !dquote ? '"' : '\'';
    static const char hex[] = "0123456789abcdef";
    for (size_t k = 0; k < n; k++) {
        unsigned char c = p[k];
        char e[4];
        if (c == quote || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            bc_put(t, e, 2);
        } else if (c == '\t') {
            bc_put(t, "\\t", 2);
        } else if (c == '\n') {
            bc_put(t, "\\n", 2);
        } else if (c == '\r') {
            bc_put(t, "\\r", 2);
        } else if (c < ' ' || c >= 0x7f) {
            e[0] = '\\';
            e[1] = 'x';
            e[2] = hex[c >> 4];
            e[3] = hex[c & 15];
            bc_put(t, e, 4);
        } else {
            bc_put(t, &c, 1);
        }
    }
}

/* bytes.hex() of fields known to be bytes. */
static void bc_put_hex(bc_text *t, const uint64_t *w, size_t n) {
    static const char hex[] = "0123456789abcdef";
    for (size_t k = 0; k < n; k++) {
        char e[2] = {hex[(w[k] >> 4) & 15], hex[w[k] & 15]};
        bc_put(t, e, 2);
    }
}

/* The first sub-block of this id of the block at b; SIZE_MAX when none. */
static size_t bc_first_block(const uint64_t *v, size_t b, uint64_t bid) {
    BC_CHILDREN(v, b, i) {
        if (BC_IS_BEGIN(v, i) && v[i + 1] == bid)
            return i;
    }
    return SIZE_MAX;
}

/* --- bitcode.metadata_strings ---------------------------------------------------------------------- */

typedef struct {
    size_t at, n; /* in the blob */
} bc_span;

/* The strings of a METADATA_STRINGS record [count, offset, blob]: `count` VBR6 lengths from the
   blob's first `offset` bytes (bits past the blob 0, as Reader.run reads them: every value decoded
   before the end is checked), then the strings from byte `offset` on, abutting. */
static int bc_md_strings(bc_mf *f, uint64_t count, uint64_t offset, const uint8_t *blob, size_t n, bc_span **out,
                         size_t *nout) {
    *out = NULL;
    *nout = 0;
    if (offset > n)
        return bc_bad(&f->fault, "bad METADATA_STRINGS offset");
    uint64_t end = 8 * offset;
    if (count > end / 6)
        return bc_bad(&f->fault, "read past the end");
    bc_span *spans = malloc((count ? (size_t)count : 1) * sizeof(bc_span));
    if (!spans)
        return BC_NOMEM;
    uint64_t pos = 0;
    for (uint64_t k = 0; k < count; k++) {
        uint64_t value = 0, shift = 0;
        int more = 1, over = 0;
        for (int first = 1; more; first = 0) {
            if (!first && shift >= 64) {
                free(spans);
                return bc_bad(&f->fault, "vbr too long");
            }
            uint64_t chunk = 0;
            for (int bit = 0; bit < 6; bit++) {
                uint64_t p = pos + (uint64_t)bit;
                if ((p >> 3) < n)
                    chunk |= (uint64_t)((blob[p >> 3] >> (p & 7)) & 1) << bit;
            }
            pos += 6;
            uint64_t low = chunk & 31;
            if (shift + 5 > 64 && (low >> (64 - shift)))
                over = 1;
            value |= low << shift;
            shift += 5;
            more = (chunk & 32) != 0;
        }
        if (over) {
            free(spans);
            return bc_bad(&f->fault, "vbr too long");
        }
        spans[k].n = (size_t)(value > n ? (uint64_t)n + 1 : value); /* past the blob either way */
    }
    if (pos > end) {
        free(spans);
        return bc_bad(&f->fault, "read past the end");
    }
    uint64_t at = offset;
    for (uint64_t k = 0; k < count; k++) {
        spans[k].at = (size_t)at;
        at += spans[k].n;
        if (at > n) {
            free(spans);
            return bc_bad(&f->fault, "METADATA_STRINGS runs past its blob");
        }
    }
    *out = spans;
    *nout = (size_t)count;
    return BC_OK;
}

/* A record's blob fields (known to be bytes) as bytes, malloc'd. */
static uint8_t *bc_blob_of(const uint64_t *w, size_t n) {
    uint8_t *p = malloc(n ? n : 1);
    if (p)
        for (size_t k = 0; k < n; k++)
            p[k] = (uint8_t)w[k];
    return p;
}

/* --- irmodule.asm_of ------------------------------------------------------------------------------- */

static int bc_add_fact(bc_facts_out *o, int kind, size_t at, size_t n, int64_t value) {
    void *grown = o->facts;
    if (bc_grow(&grown, o->n, &o->cap, sizeof(bc_fact), 16))
        return BC_NOMEM;
    o->facts = grown;
    o->facts[o->n++] = (bc_fact){kind, at, n, value};
    return BC_OK;
}

/* A string of fields as a fact (record_bytes: BadBitcode for one above 255). */
static int bc_string_fact(bc_mf *f, bc_facts_out *o, int kind, const uint64_t *w, size_t n) {
    size_t at = o->bytes.n;
    CHECK(bc_mf_bytes(f, w, n, &o->bytes));
    return bc_add_fact(o, kind, at, o->bytes.n - at, 0);
}

static int bc_asm_constants(bc_mf *f, size_t b, bc_facts_out *o) {
    const uint64_t *v = f->v;
    const bc_facts_tables *tb = f->tb;
    BC_CHILDREN(v, b, i) {
        if (BC_IS_BEGIN(v, i))
            continue;
        size_t k = 0;
        while (k < tb->nasm && tb->asm_codes[k] != v[i + 1])
            k++;
        if (k == tb->nasm)
            continue;
        const uint64_t *fields = v + i + 2;
        uint64_t nf = BC_COUNT(v, i) - 1, at = tb->asm_at[k];
        /* BitcodeReader::parseConstants: the asm string, then the constraints' length and string. */
        if (at >= nf || fields[at] >= nf - at - 1 || fields[at + 1 + fields[at]] > nf - at - 2 - fields[at])
            return bc_bad(&f->fault, "bad INLINEASM record");
        CHECK(bc_string_fact(f, o, FACT_TEMPLATE, fields + at + 1, (size_t)fields[at]));
    }
    return BC_OK;
}

static int bc_asm_of(bc_mf *f, bc_facts_out *o) {
    const uint64_t *v = f->v;
    size_t modules = 0, strtab_at = 0, strtab_n = 0;
    int has_strtab = 0;
    for (size_t i = 0; i < f->n; i = bc_next(v, i)) {
        if (!BC_IS_BEGIN(v, i))
            continue;
        if (v[i + 1] == BC_MODULE) {
            modules++;
            BC_CHILDREN(v, i, j) {
                if (!BC_IS_BEGIN(v, j)) {
                    if (v[j + 1] == MODULE_ASM)
                        CHECK(bc_string_fact(f, o, FACT_ASM, v + j + 2, BC_COUNT(v, j) - 1));
                } else if (v[j + 1] == BC_CONSTANTS) {
                    CHECK(bc_asm_constants(f, j, o));
                } else if (v[j + 1] == BC_FUNCTION) {
                    size_t first = j + 6, end = (size_t)v[j + 3] - 1;
                    if (first >= end || BC_IS_BEGIN(v, first) || v[first + 1] != FUNC_DECLAREBLOCKS)
                        return bc_bad(&f->fault, "a function block that does not start with DECLAREBLOCKS");
                    size_t second = bc_next(v, first);
                    if (second < end && BC_IS_BEGIN(v, second) && v[second + 1] == BC_CONSTANTS)
                        CHECK(bc_asm_constants(f, second, o));
                }
            }
        } else if (v[i + 1] == BC_STRTAB) {
            has_strtab = 1;
            strtab_at = o->bytes.n;
            BC_CHILDREN(v, i, j) {
                if (!BC_IS_BEGIN(v, j) && v[j + 1] == STRTAB_BLOB)
                    CHECK(bc_mf_bytes(f, v + j + 2, BC_COUNT(v, j) - 1, &o->bytes));
            }
            strtab_n = o->bytes.n - strtab_at;
        }
    }
    if (!modules)
        return bc_bad(&f->fault, "no module");
    return has_strtab ? bc_add_fact(o, FACT_STRTAB, strtab_at, strtab_n, 0) : BC_OK;
}

/* --- irmodule.facts_of ----------------------------------------------------------------------------- */

/* _Constants.integer: the integer constant of this value id; *found 0 for another kind of value. */
static void bc_constant_integer(const uint64_t *v, size_t constants, uint64_t global_values, uint64_t value_id,
                                int *found, int64_t *value) {
    *found = 0;
    if (value_id < global_values || constants == SIZE_MAX)
        return;
    uint64_t i = value_id - global_values;
    BC_CHILDREN(v, constants, j) {
        if (BC_IS_BEGIN(v, j) || v[j + 1] == CST_SETTYPE)
            continue;
        if (i == 0) {
            if (v[j + 1] == CST_INTEGER && BC_COUNT(v, j) == 2) { /* signed VBR: the sign in the low bit */
                uint64_t x = v[j + 2];
                *found = 1;
                *value = x & 1 ? -(int64_t)(x >> 1) : (int64_t)(x >> 1);
            } else if (v[j + 1] == CST_NULL) {
                *found = 1;
                *value = 0;
            }
            return;
        }
        i--;
    }
}

/* A metadata id's record (its event index), as _module_flags's `nodes` holds them. */
typedef struct {
    size_t *at; /* SIZE_MAX: none */
    size_t n;
} bc_md_nodes;

static int bc_md_set(bc_md_nodes *m, uint64_t id, size_t at) {
    if (id >= m->n) {
        if (id >= SIZE_MAX / (2 * sizeof(size_t)))
            return BC_NOMEM;
        size_t cap = m->n ? m->n : 64;
        while (cap <= id)
            cap *= 2;
        size_t *grown = realloc(m->at, cap * sizeof(size_t));
        if (!grown)
            return BC_NOMEM;
        for (size_t k = m->n; k < cap; k++)
            grown[k] = SIZE_MAX;
        m->at = grown;
        m->n = cap;
    }
    m->at[id] = at;
    return BC_OK;
}

static size_t bc_md_get(const bc_md_nodes *m, uint64_t id) {
    return id < m->n ? m->at[id] : SIZE_MAX;
}

static int bc_not_found(bc_mf *f, uint64_t md) {
    snprintf(f->fault.message, sizeof f->fault.message, "metadata %llu not found", (unsigned long long)md);
    return BC_BAD;
}

/* _module_flags, from the module-level METADATA block at b. */
static int bc_module_flags_with(bc_mf *f, size_t b, size_t constants, uint64_t global_values, bc_facts_out *o,
                                bc_md_nodes *nodes, uint8_t **blob, bc_span **strings) {
    const uint64_t *v = f->v;
    const bc_facts_tables *tb = f->tb;
    size_t nstrings = 0, flags_at = SIZE_MAX;
    uint64_t next_id = 0;
    int named = 0, is_flags = 0;
    BC_CHILDREN(v, b, i) {
        if (BC_IS_BEGIN(v, i))
            continue;
        uint64_t kind = v[i + 1];
        size_t n = BC_COUNT(v, i);
        if (named && kind != MD_NAMED_NODE)
            return bc_bad(&f->fault, "METADATA_NAME not followed by its node");
        if (kind == MD_STRINGS) {
            if (n < 3)
                return bc_bad(&f->fault, "bad METADATA_STRINGS record");
            if (bc_has_above_255(v + i + 4, n - 3))
                return bc_bad(&f->fault, "a character above 255 in a string");
            free(*blob);
            free(*strings);
            *strings = NULL;
            if (!(*blob = bc_blob_of(v + i + 4, n - 3)))
                return BC_NOMEM;
            CHECK(bc_md_strings(f, v[i + 2], v[i + 3], *blob, n - 3, strings, &nstrings));
            next_id = nstrings;
        } else if (kind == MD_NAME) {
            if (bc_has_above_255(v + i + 2, n - 1))
                return bc_bad(&f->fault, "a character above 255 in a string");
            named = 1;
            is_flags = n - 1 == tb->nmodule_flags;
            for (size_t k = 0; is_flags && k < tb->nmodule_flags; k++)
                is_flags = v[i + 2 + k] == tb->module_flags[k];
        } else if (kind == MD_NAMED_NODE) {
            if (named && is_flags)
                flags_at = i;
            named = 0;
        } else if (!bc_codes_in(&f->md_no_id, kind)) {
            CHECK(bc_md_set(nodes, next_id, i));
            next_id++;
        }
    }
    if (flags_at == SIZE_MAX)
        return BC_OK;
    for (size_t k = 0; k + 1 < BC_COUNT(v, flags_at); k++) {
        uint64_t md = v[flags_at + 2 + k];
        size_t node = bc_md_get(nodes, md);
        if (node == SIZE_MAX)
            return bc_not_found(f, md);
        if (v[node + 1] != MD_NODE && v[node + 1] != MD_DISTINCT)
            return bc_bad(&f->fault, "a module flag that is not a node");
        if (BC_COUNT(v, node) != 4)
            continue; /* not {behaviour, name, value} */
        uint64_t name_op = v[node + 3], value_op = v[node + 4]; /* operands are ids + 1 */
        if (name_op == 0 || name_op - 1 >= nstrings)
            return bc_bad(&f->fault, "a module flag whose name is not a string");
        /* _integer */
        if (value_op == 0 || value_op - 1 < nstrings)
            continue;
        size_t value = bc_md_get(nodes, value_op - 1);
        if (value == SIZE_MAX)
            return bc_not_found(f, value_op - 1);
        if (v[value + 1] != MD_VALUE || BC_COUNT(v, value) != 3)
            continue;
        int found;
        int64_t number;
        bc_constant_integer(v, constants, global_values, v[value + 3], &found, &number);
        if (!found)
            continue;
        const bc_span *s = &(*strings)[name_op - 1];
        size_t at = o->bytes.n;
        bc_put(&o->bytes, *blob + s->at, s->n);
        if (o->bytes.failed)
            return BC_NOMEM;
        CHECK(bc_add_fact(o, FACT_FLAG, at, s->n, number));
    }
    return BC_OK;
}

static int bc_facts_of(bc_mf *f, bc_facts_out *o) {
    const uint64_t *v = f->v;
    size_t module = SIZE_MAX;
    for (size_t i = 0; i < f->n && module == SIZE_MAX; i = bc_next(v, i))
        if (BC_IS_BEGIN(v, i) && v[i + 1] == BC_MODULE)
            module = i;
    if (module == SIZE_MAX)
        return bc_bad(&f->fault, "no module");
    size_t constants = SIZE_MAX, metadata = SIZE_MAX, triple = SIZE_MAX;
    uint64_t global_values = 0;
    BC_CHILDREN(v, module, i) {
        if (BC_IS_BEGIN(v, i)) {
            if (v[i + 1] == BC_CONSTANTS && constants == SIZE_MAX) {
                constants = i;
            } else if (v[i + 1] == BC_METADATA && metadata == SIZE_MAX) {
                metadata = i;
                break; /* what follows the module-level metadata is not needed */
            }
        } else if (v[i + 1] == MODULE_TRIPLE) {
            if (bc_has_above_255(v + i + 2, BC_COUNT(v, i) - 1))
                return bc_bad(&f->fault, "a character above 255 in a string");
            triple = i;
        } else if (bc_in(&f->tb->global_value_codes, v[i + 1])) {
            if (constants != SIZE_MAX)
                return bc_bad(&f->fault, "a global value after the module's constants");
            global_values++;
        }
    }
    if (triple == SIZE_MAX)
        CHECK(bc_add_fact(o, FACT_TRIPLE, o->bytes.n, 0, 0));
    else
        CHECK(bc_string_fact(f, o, FACT_TRIPLE, v + triple + 2, BC_COUNT(v, triple) - 1));
    if (metadata == SIZE_MAX)
        return BC_OK; /* no metadata: no flags */
    bc_md_nodes nodes = {NULL, 0};
    uint8_t *blob = NULL;
    bc_span *strings = NULL;
    int e = bc_module_flags_with(f, metadata, constants, global_values, o, &nodes, &blob, &strings);
    free(nodes.at);
    free(blob);
    free(strings);
    return e;
}

/* --- irmodule.producer_of -------------------------------------------------------------------------- */

static int bc_producer_of(bc_mf *f, bc_facts_out *o) {
    const uint64_t *v = f->v;
    for (size_t i = 0; i < f->n; i = bc_next(v, i)) {
        if (!BC_IS_BEGIN(v, i))
            continue;
        if (v[i + 1] == BC_IDENTIFICATION) {
            BC_CHILDREN(v, i, j) {
                if (!BC_IS_BEGIN(v, j) && v[j + 1] == IDENTIFICATION_STRING)
                    return bc_string_fact(f, o, FACT_PRODUCER, v + j + 2, BC_COUNT(v, j) - 1);
            }
        }
        break;
    }
    return bc_add_fact(o, FACT_PRODUCER, o->bytes.n, 0, 0);
}

/* --- interface.interface_of ------------------------------------------------------------------------ */

/* interface._Types */
typedef struct {
    size_t *rec;       /* per type id: its record's event index */
    size_t n;
    size_t *name_at;   /* per type id: its name in names, SIZE_MAX when unnamed */
    size_t *name_n;
    bc_text names;
    size_t *created;   /* getIdentifiedStructTypes order */
    size_t ncreated;
    size_t *cache_at;  /* per type id: its text in cache, SIZE_MAX until made */
    size_t *cache_n;
    bc_text cache;
} bc_types;

static void bc_types_free(bc_types *t) {
    free(t->rec);
    free(t->name_at);
    free(t->name_n);
    bc_text_free(&t->names);
    free(t->created);
    free(t->cache_at);
    free(t->cache_n);
    bc_text_free(&t->cache);
}

static int bc_is_primitive(const bc_facts_tables *tb, uint64_t code, size_t *k) {
    for (*k = 0; *k < tb->nprimitive; (*k)++)
        if (tb->primitive[*k] == code)
            return 1;
    return 0;
}

/* _Types._reads: the type ids a record names, in two runs (a function's parameters, then its return). */
static void bc_type_reads(const uint64_t *r, size_t n, const uint64_t **a, size_t *na, const uint64_t **b,
                          size_t *nb) {
    uint64_t code = r[0];
    *na = *nb = 0;
    *a = *b = r;
    if (code == TYPE_ARRAY || code == TYPE_VECTOR) {
        if (n >= 3) {
            *a = r + 2;
            *na = 1;
        }
    } else if (code == TYPE_STRUCT_ANON || code == TYPE_STRUCT_NAMED) {
        if (n > 2) {
            *a = r + 2;
            *na = n - 2;
        }
    } else if (code == TYPE_FUNCTION) {
        if (n > 3) {
            *a = r + 3;
            *na = n - 3;
        }
        if (n >= 3) {
            *b = r + 2;
            *nb = 1;
        }
    } else if (code == TYPE_TARGET) {
        if (n >= 2) {
            *a = r + 2;
            *na = (size_t)(r[1] < n - 2 ? r[1] : n - 2);
        }
    }
}

static int bc_types_init(bc_mf *f, bc_types *t, size_t b) {
    const uint64_t *v = f->v;
    const bc_facts_tables *tb = f->tb;
    size_t total = 0;
    if (b != SIZE_MAX) {
        BC_CHILDREN(v, b, i) total++;
    }
    size_t cap = total ? total : 1;
    t->rec = malloc(cap * sizeof(size_t));
    t->name_at = malloc(cap * sizeof(size_t));
    t->name_n = malloc(cap * sizeof(size_t));
    t->created = malloc(cap * sizeof(size_t));
    t->cache_at = malloc(cap * sizeof(size_t));
    t->cache_n = malloc(cap * sizeof(size_t));
    unsigned char *in_created = calloc(cap, 1);
    if (!t->rec || !t->name_at || !t->name_n || !t->created || !t->cache_at || !t->cache_n || !in_created) {
        free(in_created);
        return BC_NOMEM;
    }
    if (b == SIZE_MAX) {
        free(in_created);
        return BC_OK;
    }
    int e = BC_OK, pending = 0, bad_forward = 0;
    size_t pending_at = 0, pending_n = 0;
    BC_CHILDREN(v, b, i) {
        if (BC_IS_BEGIN(v, i)) {
            e = bc_why(&f->fault, "block ", &v[i + 1], " in TYPE");
            goto done;
        }
        const uint64_t *r = v + i + 1;
        size_t n = BC_COUNT(v, i), k;
        uint64_t code = r[0];
        if (code == TYPE_NUMENTRY)
            continue;
        if (code == TYPE_STRUCT_NAME) {
            pending_at = t->names.n;
            if ((e = bc_mf_bytes(f, r + 1, n - 1, &t->names)))
                goto done;
            pending_n = n - 1;
            pending = 1;
            continue;
        }
        if (code != TYPE_STRUCT_ANON && !bc_is_primitive(tb, code, &k) && code != TYPE_OPAQUE &&
            code != TYPE_INTEGER && code != TYPE_ARRAY && code != TYPE_VECTOR && code != TYPE_STRUCT_NAMED &&
            code != TYPE_FUNCTION && code != TYPE_OPAQUE_POINTER && code != TYPE_TARGET) {
            e = bc_why(&f->fault, "type record ", &code, ""); /* typed pointers (8, LLVM < 17) among them */
            goto done;
        }
        size_t tid = t->n++;
        t->rec[tid] = i;
        t->name_at[tid] = SIZE_MAX;
        t->name_n[tid] = 0;
        t->cache_at[tid] = SIZE_MAX;
        t->cache_n[tid] = 0;
        if (pending) {
            if (code != TYPE_OPAQUE && code != TYPE_STRUCT_NAMED && code != TYPE_TARGET) {
                e = bc_why(&f->fault, "a type name before an unnamed type", NULL, "");
                goto done;
            }
            t->name_at[tid] = pending_at;
            t->name_n[tid] = pending_n;
            pending = 0;
        }
        if ((code == TYPE_OPAQUE || code == TYPE_STRUCT_NAMED) && !in_created[tid]) {
            in_created[tid] = 1;
            t->created[t->ncreated++] = tid;
        }
        const uint64_t *a, *c;
        size_t na, nc;
        bc_type_reads(r, n, &a, &na, &c, &nc);
        for (int run = 0; run < 2; run++) {
            const uint64_t *s = run ? c : a;
            size_t ns = run ? nc : na;
            for (size_t k2 = 0; k2 < ns; k2++) {
                if (s[k2] <= tid)
                    continue;
                if (s[k2] >= total) {
                    bad_forward = 1; /* never a type of this table: refused below */
                } else if (!in_created[s[k2]]) {
                    in_created[s[k2]] = 1;
                    t->created[t->ncreated++] = (size_t)s[k2];
                }
            }
        }
    }
    if (pending) {
        e = bc_why(&f->fault, "a type name at the end of TYPE", NULL, "");
        goto done;
    }
    for (size_t k = 0; k < t->ncreated && !bad_forward; k++) {
        size_t tid = t->created[k];
        bad_forward = tid >= t->n || (v[t->rec[tid] + 1] != TYPE_OPAQUE && v[t->rec[tid] + 1] != TYPE_STRUCT_NAMED);
    }
    if (bad_forward)
        e = bc_why(&f->fault, "a forward type reference to what is not a struct", NULL, "");
done:
    free(in_created);
    if (!e && t->names.failed)
        e = BC_NOMEM;
    return e;
}

static int bc_type_text(bc_mf *f, bc_types *t, uint64_t tid, uint64_t depth, bc_text *out);

/* _Types.body */
static int bc_type_body(bc_mf *f, bc_types *t, size_t tid, uint64_t depth, bc_text *out) {
    const uint64_t *r = f->v + t->rec[tid] + 1;
    size_t n = BC_COUNT(f->v, t->rec[tid]);
    if (r[0] == TYPE_OPAQUE) {
        bc_puts(out, "opaque");
        return BC_OK;
    }
    if (n < 2)
        return bc_why(&f->fault, "struct record layout", NULL, "");
    bc_puts(out, r[1] ? "{packed " : "{");
    for (size_t k = 2; k < n; k++) {
        if (k > 2)
            bc_puts(out, ", ");
        CHECK(bc_type_text(f, t, r[k], depth + 1, out));
    }
    bc_puts(out, "}");
    return BC_OK;
}

static int bc_type_list(bc_mf *f, bc_types *t, const uint64_t *ids, size_t n, uint64_t depth, bc_text *out) {
    for (size_t k = 0; k < n; k++) {
        if (k)
            bc_puts(out, ", ");
        CHECK(bc_type_text(f, t, ids[k], depth, out));
    }
    return BC_OK;
}

/* _Types.text: a named struct by its name, any other type by its structure; made once a type. */
static int bc_type_text(bc_mf *f, bc_types *t, uint64_t tid, uint64_t depth, bc_text *out) {
    if (tid < t->n && t->cache_at[tid] != SIZE_MAX) {
        bc_put(out, t->cache.p + t->cache_at[tid], t->cache_n[tid]);
        return out->failed ? BC_NOMEM : out->n > BC_TEXT_LIMIT ? BC_DEFER : BC_OK;
    }
    if (tid >= t->n || depth > f->tb->max_depth)
        return bc_why(&f->fault, "type id ", &tid, "");
    const uint64_t *r = f->v + t->rec[tid] + 1, *fl = r + 1;
    size_t nf = BC_COUNT(f->v, t->rec[tid]) - 1, k, start = out->n;
    uint64_t code = r[0];
    int named = t->name_at[tid] != SIZE_MAX;
    if (bc_is_primitive(f->tb, code, &k)) {
        bc_puts(out, f->tb->primitive_names[k]);
    } else if (code == TYPE_INTEGER && nf == 1) {
        bc_puts(out, "i");
        bc_putu(out, fl[0]);
    } else if (code == TYPE_OPAQUE_POINTER && nf == 1) {
        bc_puts(out, "ptr");
        bc_putu(out, fl[0]);
    } else if (code == TYPE_ARRAY && nf == 2) {
        bc_puts(out, "[");
        bc_putu(out, fl[0]);
        bc_puts(out, " x ");
        CHECK(bc_type_text(f, t, fl[1], depth + 1, out));
        bc_puts(out, "]");
    } else if (code == TYPE_VECTOR && (nf == 2 || nf == 3)) {
        bc_puts(out, nf == 3 && fl[2] ? "<vscale " : "<");
        bc_putu(out, fl[0]);
        bc_puts(out, " x ");
        CHECK(bc_type_text(f, t, fl[1], depth + 1, out));
        bc_puts(out, ">");
    } else if (code == TYPE_FUNCTION && nf >= 2) {
        bc_puts(out, fl[0] ? "fn... " : "fn ");
        CHECK(bc_type_text(f, t, fl[1], depth + 1, out));
        bc_puts(out, " (");
        CHECK(bc_type_list(f, t, fl + 2, nf - 2, depth + 1, out));
        bc_puts(out, ")");
    } else if (code == TYPE_STRUCT_ANON && nf) {
        bc_puts(out, fl[0] ? "{packed " : "{");
        CHECK(bc_type_list(f, t, fl + 1, nf - 1, depth + 1, out));
        bc_puts(out, "}");
    } else if ((code == TYPE_STRUCT_NAMED || code == TYPE_OPAQUE) && named) {
        bc_puts(out, "%");
        bc_put_name(out, (const uint8_t *)t->names.p + t->name_at[tid], t->name_n[tid]);
    } else if (code == TYPE_STRUCT_NAMED || code == TYPE_OPAQUE) {
        bc_puts(out, "%anonymous "); /* an unnamed identified struct */
        CHECK(bc_type_body(f, t, (size_t)tid, depth + 1, out));
    } else if (code == TYPE_TARGET && nf && named) {
        size_t params = (size_t)(fl[0] < nf - 1 ? fl[0] : nf - 1);
        bc_puts(out, "target ");
        bc_put_name(out, (const uint8_t *)t->names.p + t->name_at[tid], t->name_n[tid]);
        bc_puts(out, " (");
        CHECK(bc_type_list(f, t, fl + 1, params, depth + 1, out));
        bc_puts(out, ") ");
        bc_putints(out, fl + 1 + params, nf - 1 - params);
    } else {
        f->fault.why.n = 0;
        bc_puts(&f->fault.why, "type record ");
        bc_putints(&f->fault.why, r, nf + 1);
        return BC_UNKNOWN;
    }
    if (out->failed)
        return BC_NOMEM;
    if (out->n > BC_TEXT_LIMIT)
        return BC_DEFER;
    t->cache_at[tid] = t->cache.n;
    t->cache_n[tid] = out->n - start;
    bc_put(&t->cache, out->p + start, out->n - start);
    return t->cache.failed ? BC_NOMEM : BC_OK;
}

/* _Types.reaches_named: whether a named struct is part of the type. */
static int bc_reaches_named(bc_mf *f, bc_types *t, uint64_t tid, uint64_t depth, int *yes) {
    if (!f->steps--)
        return BC_DEFER;
    if (depth > f->tb->max_depth || tid >= t->n)
        return bc_why(&f->fault, "type id ", &tid, "");
    if (t->name_at[tid] != SIZE_MAX) {
        *yes = 1;
        return BC_OK;
    }
    const uint64_t *a, *c;
    size_t na, nc;
    bc_type_reads(f->v + t->rec[tid] + 1, BC_COUNT(f->v, t->rec[tid]), &a, &na, &c, &nc);
    for (int run = 0; run < 2; run++)
        for (size_t k = 0; k < (run ? nc : na); k++) {
            CHECK(bc_reaches_named(f, t, (run ? c : a)[k], depth + 1, yes));
            if (*yes)
                return BC_OK;
        }
    *yes = 0;
    return BC_OK;
}

/* interface._Global */
typedef struct {
    uint64_t code, linkage, value_type; /* value_type: the record's field 3 */
    size_t name_at, name_n;             /* in the string table */
} bc_global;

/* interface._Values' constants: (type id, record) */
typedef struct {
    int has_type;
    uint64_t type;
    size_t rec;
} bc_constant;

typedef struct {
    bc_types types;
    bc_global *globals;
    size_t nglobals;
    bc_constant *constants;
    size_t nconstants;
    const uint8_t *strtab;
} bc_iface;

/* _Global.text */
static void bc_global_text(const bc_facts_tables *tb, const bc_iface *m, const bc_global *g, bc_text *out) {
    bc_puts(out, bc_in(&tb->local_linkages, g->linkage) ? "@local "
                 : g->linkage == tb->appending                ? "@appending "
                                                              : "@global ");
    bc_put_name(out, m->strtab ? m->strtab + g->name_at : (const uint8_t *)"", g->name_n);
}

/* _Values.text: a value named in metadata. */
static int bc_value_text(bc_mf *f, bc_iface *m, uint64_t vid, bc_text *out) {
    if (vid < m->nglobals) {
        const bc_global *g = &m->globals[vid];
        if (g->linkage == f->tb->appending)
            return bc_why(&f->fault, "metadata names an appending variable", NULL, ""); /* IRMover would link it */
        bc_global_text(f->tb, m, g, out);
        return BC_OK;
    }
    if (vid - m->nglobals >= m->nconstants)
        return bc_why(&f->fault, "value id ", &vid, "");
    const bc_constant *c = &m->constants[vid - m->nglobals];
    const uint64_t *r = f->v + c->rec + 1;
    if (!c->has_type || !bc_in(&f->tb->simple_constants, r[0]))
        return bc_why(&f->fault, "metadata names constant ", r, "");
    CHECK(bc_type_text(f, &m->types, c->type, 0, out));
    bc_puts(out, " const ");
    bc_putints(out, r, BC_COUNT(f->v, c->rec));
    return BC_OK;
}

/* An id's text in _metadata's `ids`: a string, a node (or value), or a debug-info node. */
enum { ID_STRING, ID_NODE, ID_DEBUG };
typedef struct {
    int kind;
    size_t at, n; /* a string: in its blob (`blob`), a node: its record's event index */
    size_t blob;  /* which blob (index in bc_metadata.blobs) */
} bc_md_id;

typedef struct {
    bc_md_id *ids;
    size_t n, cap;
    uint8_t **blobs;
    size_t nblobs, capblobs;
    size_t *roots; /* event indexes of NAMED_NODE and KIND records */
    size_t *root_name; /* per root: the NAME record's event index (SIZE_MAX for KIND) */
    size_t nroots, caproots;
    unsigned char *seen;
    size_t *todo;
    size_t ntodo, captodo;
} bc_metadata;

static void bc_metadata_free(bc_metadata *d) {
    free(d->ids);
    for (size_t k = 0; k < d->nblobs; k++)
        free(d->blobs[k]);
    free(d->blobs);
    free(d->roots);
    free(d->root_name);
    free(d->seen);
    free(d->todo);
}

static int bc_md_id_add(bc_metadata *d, bc_md_id id) {
    void *grown = d->ids;
    if (bc_grow(&grown, d->n, &d->cap, sizeof(bc_md_id), 256))
        return BC_NOMEM;
    d->ids = grown;
    d->ids[d->n++] = id;
    return BC_OK;
}

/* _metadata's named(): the targets' ids as text; raw: targets are ids (else ids + 1, 0 null). */
static int bc_md_named(bc_mf *f, const bc_metadata *d, const uint64_t *targets, size_t n, int raw, bc_text *out) {
    for (size_t k = 0; k < n; k++) {
        uint64_t t = targets[k];
        if (!raw && t == 0)
            continue;
        if ((raw ? t : t - 1) >= d->n)
            return bc_why(&f->fault, "metadata reference past the end", NULL, "");
    }
    for (size_t k = 0; k < n; k++) {
        if (k)
            bc_put(out, " ", 1);
        if (!raw && targets[k] == 0) {
            bc_puts(out, "null");
            continue;
        }
        uint64_t t = raw ? targets[k] : targets[k] - 1;
        const bc_md_id *id = &d->ids[t];
        if (id->kind == ID_STRING) {
            bc_put(out, "s", 1);
            static const char hex[] = "0123456789abcdef";
            const uint8_t *p = d->blobs[id->blob] + id->at;
            for (size_t j = 0; j < id->n; j++) {
                char e[2] = {hex[p[j] >> 4], hex[p[j] & 15]};
                bc_put(out, e, 2);
            }
        } else if (id->kind == ID_NODE) {
            bc_put(out, "#", 1);
            bc_putu(out, t);
        } else {
            bc_puts(out, "debug");
        }
    }
    return BC_OK;
}

static int bc_md_todo(bc_metadata *d, uint64_t t) {
    void *grown = d->todo;
    if (bc_grow(&grown, d->ntodo, &d->captodo, sizeof(size_t), 256))
        return BC_NOMEM;
    d->todo = grown;
    d->todo[d->ntodo++] = (size_t)t;
    return BC_OK;
}

/* interface._metadata: the METADATA block at b as its lines (each indented by four) in out. */
static int bc_metadata_lines_with(bc_mf *f, bc_iface *m, bc_metadata *d, size_t b, bc_text *out) {
    const uint64_t *v = f->v;
    size_t name = SIZE_MAX;
    BC_CHILDREN(v, b, i) {
        if (BC_IS_BEGIN(v, i))
            return bc_why(&f->fault, "block ", &v[i + 1], " in METADATA");
        uint64_t code = v[i + 1];
        size_t n = BC_COUNT(v, i);
        if (!bc_codes_in(&f->md_known, code))
            return bc_why(&f->fault, "metadata record ", &code, "");
        if (code == MD_STRINGS) {
            if (n < 3)
                return BC_DEFER; /* the Python one's IndexError */
            if (bc_has_above_255(v + i + 4, n - 3))
                return bc_bad(&f->fault, "a character above 255 in a string");
            void *grown = d->blobs;
            if (bc_grow(&grown, d->nblobs, &d->capblobs, sizeof(uint8_t *), 4))
                return BC_NOMEM;
            d->blobs = grown;
            uint8_t *blob = bc_blob_of(v + i + 4, n - 3);
            if (!blob)
                return BC_NOMEM;
            d->blobs[d->nblobs++] = blob;
            bc_span *spans;
            size_t nspans;
            CHECK(bc_md_strings(f, v[i + 2], v[i + 3], blob, n - 3, &spans, &nspans));
            for (size_t k = 0; k < nspans; k++) {
                int e = bc_md_id_add(d, (bc_md_id){ID_STRING, spans[k].at, spans[k].n, d->nblobs - 1});
                if (e) {
                    free(spans);
                    return e;
                }
            }
            free(spans);
        } else if (bc_codes_in(&f->md_debug, code)) {
            CHECK(bc_md_id_add(d, (bc_md_id){ID_DEBUG, 0, 0, 0}));
        } else if (code == MD_VALUE) {
            if (n != 3)
                return bc_why(&f->fault, "metadata value", NULL, "");
            CHECK(bc_md_id_add(d, (bc_md_id){ID_NODE, i, 0, 0}));
        } else if (code == MD_NODE || code == MD_DISTINCT) {
            CHECK(bc_md_id_add(d, (bc_md_id){ID_NODE, i, 0, 0}));
        } else if (code == MD_NAME) {
            if (bc_has_above_255(v + i + 2, n - 1))
                return bc_bad(&f->fault, "a character above 255 in a string");
            name = i;
        } else if (code == MD_NAMED_NODE || code == MD_KIND) {
            if (code == MD_NAMED_NODE && name == SIZE_MAX)
                return bc_why(&f->fault, "named node without a name", NULL, "");
            void *grown = d->roots;
            size_t cap = d->caproots;
            if (bc_grow(&grown, d->nroots, &cap, sizeof(size_t), 16))
                return BC_NOMEM;
            d->roots = grown;
            grown = d->root_name;
            if (bc_grow(&grown, d->nroots, &d->caproots, sizeof(size_t), 16))
                return BC_NOMEM;
            d->root_name = grown;
            d->roots[d->nroots] = i;
            d->root_name[d->nroots++] = code == MD_NAMED_NODE ? name : SIZE_MAX;
            if (code == MD_NAMED_NODE)
                name = SIZE_MAX;
        }
        /* GLOBAL_DECL_ATTACHMENT: not linked. INDEX_OFFSET and INDEX: where the records are. */
    }
    /* the roots' lines */
    for (size_t k = 0; k < d->nroots; k++) {
        size_t i = d->roots[k];
        size_t n = BC_COUNT(v, i);
        bc_puts(out, "    ");
        if (d->root_name[k] != SIZE_MAX) {
            size_t nm = d->root_name[k];
            bc_puts(out, "named ");
            bc_put_hex(out, v + nm + 2, BC_COUNT(v, nm) - 1);
            bc_put(out, " ", 1);
            CHECK(bc_md_named(f, d, v + i + 2, n - 1, 1, out));
        } else {
            bc_puts(out, "kind ");
            bc_putints(out, v + i + 2, n - 1);
            bc_put(out, " ", 1);
        }
        bc_put(out, "\n", 1);
    }
    /* what they reach */
    d->seen = calloc(d->n ? d->n : 1, 1);
    if (!d->seen)
        return BC_NOMEM;
    for (size_t k = 0; k < d->nroots; k++) {
        size_t i = d->roots[k];
        if (d->root_name[k] == SIZE_MAX)
            continue;
        for (size_t j = 0; j + 1 < BC_COUNT(v, i); j++)
            CHECK(bc_md_todo(d, v[i + 2 + j]));
    }
    while (d->ntodo) {
        size_t t = d->todo[--d->ntodo];
        if (t >= d->n || d->seen[t] || d->ids[t].kind != ID_NODE)
            continue;
        d->seen[t] = 1;
        size_t i = d->ids[t].at;
        if (v[i + 1] == MD_VALUE)
            continue;
        for (size_t j = 0; j + 1 < BC_COUNT(v, i); j++) {
            uint64_t target = v[i + 2 + j];
            if (target != 0 && target - 1 < d->n)
                CHECK(bc_md_todo(d, target - 1)); /* 0: null */
        }
    }
    for (size_t t = 0; t < d->n; t++) {
        if (!d->seen[t])
            continue;
        size_t i = d->ids[t].at;
        bc_puts(out, "    #");
        bc_putu(out, t);
        if (v[i + 1] == MD_VALUE) {
            bc_puts(out, " value ");
            CHECK(bc_type_text(f, &m->types, v[i + 2], 0, out));
            bc_put(out, " ", 1);
            CHECK(bc_value_text(f, m, v[i + 3], out));
            bc_puts(out, " \n");
        } else {
            bc_puts(out, " node");
            bc_putu(out, v[i + 1]);
            bc_put(out, " ", 1);
            CHECK(bc_md_named(f, d, v + i + 2, BC_COUNT(v, i) - 1, 0, out));
            bc_put(out, "\n", 1);
        }
        if (out->n > BC_TEXT_LIMIT)
            return BC_DEFER;
    }
    return BC_OK;
}

static int bc_metadata_lines(bc_mf *f, bc_iface *m, size_t b, bc_text *out) {
    bc_metadata d;
    memset(&d, 0, sizeof d);
    int e = bc_metadata_lines_with(f, m, &d, b, out);
    bc_metadata_free(&d);
    return e;
}

static int bc_starts_with(const uint8_t *p, size_t n, const uint8_t *prefix, size_t np) {
    return n >= np && (np == 0 || memcmp(p, prefix, np) == 0);
}

/* interface._module_interface: the MODULE_BLOCK at b as its lines in out. */
static int bc_module_iface_with(bc_mf *f, bc_iface *m, size_t b, const uint8_t *strtab, size_t nstrtab,
                                int has_strtab, bc_text *kept, bc_text *out) {
    const uint64_t *v = f->v;
    const bc_facts_tables *tb = f->tb;
    size_t ntypes = 0, nmetadata = 0, types = SIZE_MAX, metadata = SIZE_MAX, nglobal_records = 0, nconstants = 0;
    BC_CHILDREN(v, b, i) {
        if (BC_IS_BEGIN(v, i) && v[i + 1] == BC_TYPES) {
            ntypes++;
            types = i;
        } else if (BC_IS_BEGIN(v, i) && v[i + 1] == BC_METADATA) {
            nmetadata++;
            metadata = i;
        } else if (!BC_IS_BEGIN(v, i)) {
            nglobal_records++;
        } else if (v[i + 1] == BC_CONSTANTS) {
            BC_CHILDREN(v, i, j) nconstants++;
        }
    }
    if (ntypes > 1 || nmetadata > 1)
        return bc_why(&f->fault, "two type tables or metadata blocks", NULL, "");
    m->globals = malloc((nglobal_records ? nglobal_records : 1) * sizeof(bc_global));
    m->constants = malloc((nconstants ? nconstants : 1) * sizeof(bc_constant));
    if (!m->globals || !m->constants)
        return BC_NOMEM;
    m->strtab = has_strtab ? strtab : NULL;
    /* the module's own records, and the blocks that go in raw; global values noted */
    size_t nglobals = 0;
    size_t *global_at = malloc((nglobal_records ? nglobal_records : 1) * sizeof(size_t));
    if (!global_at)
        return BC_NOMEM;
    int e = BC_OK;
    BC_CHILDREN(v, b, i) {
        if (BC_IS_BEGIN(v, i)) {
            if (bc_in(&tb->raw_blocks, v[i + 1])) {
                bc_block_lines(v, i, 1, kept);
            } else if (!bc_in(&tb->passed_blocks, v[i + 1])) {
                e = bc_why(&f->fault, "block ", &v[i + 1], " in MODULE_BLOCK");
                goto done;
            }
            continue;
        }
        uint64_t code = v[i + 1];
        size_t n = BC_COUNT(v, i);
        if (code == MODULE_VERSION && !(n == 2 && v[i + 2] == 2)) {
            f->fault.why.n = 0;
            bc_puts(&f->fault.why, "module version "); /* 2: names in the string table */
            bc_putints(&f->fault.why, v + i + 2, n - 1);
            e = BC_UNKNOWN;
            goto done;
        } else if (bc_in(&tb->kept_codes, code)) {
            bc_puts(kept, "  rec ");
            bc_putints(kept, v + i + 1, n);
            bc_put(kept, "\n", 1);
        } else if (bc_in(&tb->globals_read, code)) {
            global_at[nglobals++] = i;
        } else if (!bc_in(&tb->dropped_codes, code)) {
            e = bc_why(&f->fault, "module record ", &code, "");
            goto done;
        }
    }
    if ((e = bc_types_init(f, &m->types, types)))
        goto done;
    /* _globals */
    for (size_t k = 0; k < nglobals; k++) {
        const uint64_t *r = v + global_at[k] + 1;
        size_t n = BC_COUNT(v, global_at[k]);
        uint64_t code = r[0];
        if ((code == MODULE_FUNCTION && n < 18) || (code != MODULE_FUNCTION && n < 7)) {
            e = bc_why(&f->fault, "short global value record ", &code, "");
            goto done;
        }
        uint64_t offset = r[1], size = r[2], linkage = r[6];
        if (code == MODULE_GLOBALVAR && !(r[4] & 2)) {
            e = bc_why(&f->fault, "a global variable without its value type", NULL, ""); /* before LLVM 3.9 */
            goto done;
        }
        if (!bc_in(&tb->known_linkages, linkage)) {
            e = bc_why(&f->fault, "linkage ", &linkage, "");
            goto done;
        }
        if (size && (!has_strtab || size > nstrtab || offset > nstrtab - size)) {
            e = bc_why(&f->fault, "a name past the string table", NULL, "");
            goto done;
        }
        bc_global *g = &m->globals[m->nglobals++];
        g->code = code;
        g->linkage = linkage;
        g->value_type = r[3];
        g->name_at = size && nstrtab ? (size_t)offset : 0;
        g->name_n = size && nstrtab ? (size_t)size : 0;
    }
    /* _Values' constants: of every module-level CONSTANTS block */
    BC_CHILDREN(v, b, i) {
        if (!BC_IS_BEGIN(v, i) || v[i + 1] != BC_CONSTANTS)
            continue;
        int has_type = 0;
        uint64_t type = 0;
        BC_CHILDREN(v, i, j) {
            if (BC_IS_BEGIN(v, j)) {
                e = bc_why(&f->fault, "block in CONSTANTS", NULL, "");
                goto done;
            }
            if (v[j + 1] == CST_SETTYPE) {
                has_type = BC_COUNT(v, j) > 1;
                type = has_type ? v[j + 2] : 0;
            } else {
                m->constants[m->nconstants++] = (bc_constant){has_type, type, j};
            }
        }
    }
    bc_types *ty = &m->types;
    bc_puts(out, "block 8\n");
    bc_put(out, kept->p, kept->n);
    /* IRMover moves the importer's variable of each name the module's variables have (neither
       appending nor local) to the end of its list, in this order. */
    bc_puts(out, "  variables\n");
    for (size_t k = 0; k < m->nglobals; k++) {
        const bc_global *g = &m->globals[k];
        if (g->code == MODULE_GLOBALVAR && g->name_n && !bc_in(&tb->local_linkages, g->linkage) &&
            g->linkage != tb->appending) {
            bc_puts(out, "    ");
            bc_put_name(out, m->strtab + g->name_at, g->name_n);
            bc_put(out, "\n", 1);
        }
    }
    /* appending variables of one name unify their element types */
    for (size_t k = 0; k < m->nglobals; k++) {
        const bc_global *g = &m->globals[k];
        if (g->code != MODULE_GLOBALVAR || g->linkage != tb->appending)
            continue;
        const uint64_t *r = g->value_type < ty->n ? v + ty->rec[g->value_type] + 1 : NULL;
        if (!r || r[0] != TYPE_ARRAY || BC_COUNT(v, ty->rec[g->value_type]) != 3) {
            e = bc_why(&f->fault, "an appending variable that is not an array", NULL, "");
            goto done;
        }
        bc_puts(out, "  appending ");
        bc_put_name(out, m->strtab ? m->strtab + g->name_at : (const uint8_t *)"", g->name_n);
        bc_puts(out, " of ");
        if ((e = bc_type_text(f, ty, r[2], 0, out)))
            goto done;
        bc_put(out, "\n", 1);
    }
    /* intrinsics whose types hold a named struct */
    for (size_t k = 0; k < m->nglobals; k++) {
        const bc_global *g = &m->globals[k];
        if (g->code != MODULE_FUNCTION ||
            !bc_starts_with(m->strtab ? m->strtab + g->name_at : (const uint8_t *)"", g->name_n, tb->intrinsic,
                            tb->nintrinsic))
            continue;
        int yes = 0;
        if ((e = bc_reaches_named(f, ty, g->value_type, 0, &yes)))
            goto done;
        if (!yes)
            continue;
        bc_puts(out, "  intrinsic ");
        bc_put_name(out, m->strtab + g->name_at, g->name_n);
        bc_put(out, " ", 1);
        if ((e = bc_type_text(f, ty, g->value_type, 0, out)))
            goto done;
        bc_put(out, "\n", 1);
    }
    /* every identified struct the reader created, by name, in that order */
    bc_puts(out, "  structs\n");
    for (size_t k = 0; k < ty->ncreated; k++) {
        size_t tid = ty->created[k];
        if (ty->name_at[tid] == SIZE_MAX)
            continue;
        bc_puts(out, "    %");
        bc_put_name(out, (const uint8_t *)ty->names.p + ty->name_at[tid], ty->name_n[tid]);
        bc_put(out, " ", 1);
        if ((e = bc_type_body(f, ty, tid, 0, out)))
            goto done;
        bc_put(out, "\n", 1);
    }
    if (metadata != SIZE_MAX) {
        bc_puts(out, "  metadata\n");
        if ((e = bc_metadata_lines(f, m, metadata, out)))
            goto done;
    }
    bc_puts(out, "end 8\n");
done:
    free(global_at);
    if (!e && (out->failed || kept->failed))
        e = BC_NOMEM;
    return e;
}

static int bc_module_iface(bc_mf *f, size_t b, const uint8_t *strtab, size_t nstrtab, int has_strtab, bc_text *out) {
    bc_iface m;
    memset(&m, 0, sizeof m);
    bc_text kept = {0};
    int e = bc_module_iface_with(f, &m, b, strtab, nstrtab, has_strtab, &kept, out);
    bc_text_free(&kept);
    bc_types_free(&m.types);
    free(m.globals);
    free(m.constants);
    return e;
}

/* interface._interface: the lines after the first, in out. */
static int bc_interface_lines(bc_mf *f, bc_text *out) {
    const uint64_t *v = f->v;
    size_t nmodules = 0, imported = SIZE_MAX, nstrtabs = 0, strtab_b = SIZE_MAX;
    for (size_t i = 0; i < f->n; i = bc_next(v, i)) {
        if (!BC_IS_BEGIN(v, i))
            continue;
        if (v[i + 1] == BC_MODULE) {
            nmodules++;
            if (imported == SIZE_MAX && bc_first_block(v, i, BC_SUMMARY) != SIZE_MAX)
                imported = i;
        } else if (v[i + 1] == BC_STRTAB) {
            nstrtabs++;
            if (strtab_b == SIZE_MAX)
                strtab_b = i;
        }
    }
    /* A backend imports from a file's first module with a ThinLTO summary (lto::findThinLTOModule). */
    if (nmodules <= 1)
        imported = SIZE_MAX;
    else if (imported == SIZE_MAX) {
        uint64_t n = nmodules;
        return bc_why(&f->fault, "", &n, " modules, none with a ThinLTO summary");
    }
    if (nstrtabs > 1)
        return bc_why(&f->fault, "two string tables", NULL, "");
    bc_text strtab = {0};
    int has_strtab = strtab_b != SIZE_MAX, e = BC_OK;
    if (has_strtab) {
        size_t blobs = 0, blob = 0;
        BC_CHILDREN(v, strtab_b, j) {
            if (!BC_IS_BEGIN(v, j) && v[j + 1] == STRTAB_BLOB) {
                blobs++;
                blob = j;
            }
        }
        if (blobs != 1)
            return bc_why(&f->fault, "string table layout", NULL, "");
        if ((e = bc_mf_bytes(f, v + blob + 2, BC_COUNT(v, blob) - 1, &strtab)))
            goto done;
    }
    uint64_t count = 0;
    for (size_t i = 0; i < f->n && !e; i = bc_next(v, i)) {
        if (!BC_IS_BEGIN(v, i)) {
            bc_puts(out, "rec ");
            bc_putints(out, v + i + 1, BC_COUNT(v, i));
            bc_put(out, "\n", 1);
        } else if (v[i + 1] == BC_MODULE) {
            if (imported == SIZE_MAX || imported == i) {
                count++;
                e = bc_module_iface(f, i, (const uint8_t *)strtab.p, strtab.n, has_strtab, out);
            }
        } else if (v[i + 1] != BC_BLOCKINFO && v[i + 1] != BC_STRTAB && v[i + 1] != BC_SYMTAB) {
            bc_block_lines(v, i, 0, out); /* IDENTIFICATION: the producer */
        }
    }
    if (!e && count != 1)
        e = bc_why(&f->fault, "", &count, " modules");
done:
    bc_text_free(&strtab);
    return e;
}

/* interface._whole: every record but the module hash and the function-body offsets. */
static void bc_whole_lines(const uint64_t *v, size_t from, size_t to, int in_module, bc_text *t) {
    for (size_t i = from; i < to; i = bc_next(v, i)) {
        if (BC_IS_BEGIN(v, i)) {
            bc_puts(t, "block ");
            bc_putu(t, v[i + 1]);
            bc_put(t, "\n", 1);
            bc_whole_lines(v, i + 6, (size_t)v[i + 3] - 1, v[i + 1] == BC_MODULE, t);
            bc_puts(t, "end ");
            bc_putu(t, v[i + 1]);
            bc_put(t, "\n", 1);
        } else if (!in_module || (v[i + 1] != MODULE_VSTOFFSET && v[i + 1] != MODULE_HASH)) {
            bc_putints(t, v + i + 1, BC_COUNT(v, i));
            bc_put(t, "\n", 1);
        }
    }
}

/* modulefacts.read_python's parts in its order: the stream (data[0:len]) read under `want`
   (modulefacts.WANT), then the inline assembly, triple and flags, interface text (the stream read
   again under `whole`, interface._WHOLE, for a module it does not know) and producer into out.
   BC_OK; BC_BAD with why in error; BC_DEFER or BC_NOMEM. */
static int bc_module_facts(const uint8_t *data, size_t len, const bc_want *want, const bc_want *whole,
                           const bc_facts_tables *tables, bc_facts_out *out, char *error, size_t error_size) {
    bc_u64s ev = {0};
    bc_mf f;
    memset(&f, 0, sizeof f);
    f.tb = tables;
    f.md_known = bc_codes_of(&tables->md_known);
    f.md_debug = bc_codes_of(&tables->md_debug);
    f.md_no_id = bc_codes_of(&tables->md_no_id);
    f.steps = BC_TYPE_STEPS;
    error[0] = 0;
    int e = bc_read(data, len, want, &ev, error, error_size);
    if (e)
        goto done;
    if (bc_index_ends(&ev)) {
        snprintf(error, error_size, "events that do not nest");
        e = BC_BAD;
        goto done;
    }
    f.v = ev.v;
    f.n = ev.n;
    for (size_t i = 0; i < ev.n; i = bc_next(ev.v, i))
        if (!BC_IS_BEGIN(ev.v, i)) {
            e = bc_bad(&f.fault, "a record at the top level");
            goto bad;
        }
    if ((e = bc_asm_of(&f, out)) || (e = bc_facts_of(&f, out)))
        goto bad;
    bc_puts(&out->interface, "interface ");
    bc_puts(&out->interface, tables->format);
    size_t first = out->interface.n;
    bc_put(&out->interface, "\n", 1);
    e = bc_interface_lines(&f, &out->interface);
    if (e == BC_UNKNOWN) { /* the whole module but its bodies, read again */
        if (f.fault.why.failed) {
            e = BC_NOMEM;
            goto done;
        }
        out->interface.n = first;
        bc_puts(&out->interface, " whole (");
        bc_put(&out->interface, f.fault.why.p, f.fault.why.n);
        bc_puts(&out->interface, ")\n");
        bc_u64s all = {0};
        e = bc_read(data, len, whole, &all, error, error_size);
        if (!e && bc_index_ends(&all)) {
            snprintf(error, error_size, "events that do not nest");
            e = BC_BAD;
        }
        if (!e)
            bc_whole_lines(all.v, 0, all.n, 0, &out->interface);
        free(all.v);
        if (e)
            goto done;
    }
    if (e)
        goto bad;
    if ((e = bc_producer_of(&f, out)))
        goto bad;
    if (out->interface.failed || out->bytes.failed)
        e = BC_NOMEM;
    goto done;
bad:
    if (e == BC_BAD)
        snprintf(error, error_size, "%s", f.fault.message);
done:
    bc_text_free(&f.fault.why);
    free(ev.v);
    return e;
}

#ifndef LTOWRAP_BITCODE_CORE_ONLY
/* --- the Python layer: a Want in, Nodes out ------------------------------------------------------- */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* What an int of a Want is to the core: a block id or code (U64), the top level or another
   negative number (NEG, minus_one says which), or one no stream can hold (BIG). */
enum { INT_U64, INT_NEG, INT_BIG };

static int bc_int_of(PyObject *o, int *kind, uint64_t *v, int *minus_one) {
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "Want holds %R, not an int", o);
        return -1;
    }
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    *minus_one = 0;
    if (overflow < 0 || (!overflow && x < 0)) {
        *kind = INT_NEG;
        *minus_one = !overflow && x == -1;
        return 0;
    }
    if (!overflow) {
        *kind = INT_U64;
        *v = (uint64_t)x;
        return 0;
    }
    unsigned long long u = PyLong_AsUnsignedLongLong(o);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        *kind = INT_BIG;
        return 0;
    }
    *kind = INT_U64;
    *v = u;
    return 0;
}

/* Everything a bc_want points to, freed together. */
typedef struct {
    bc_want want;
    bc_key *keys;
    size_t capkeys;
    uint64_t **sets; /* enter, skip, and each key's only and unread */
    size_t nsets, capsets;
} bc_py_want;

static void bc_py_want_free(bc_py_want *w) {
    for (size_t i = 0; i < w->nsets; i++)
        free(w->sets[i]);
    free(w->sets);
    free(w->keys);
}

/* A set of ints (any iterable) as a sorted bc_set of what fits in 64 bits. */
static int bc_set_of(bc_py_want *w, PyObject *iterable, bc_set *set) {
    PyObject *seq = PySequence_Fast(iterable, "Want's sets must be iterable");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (w->nsets == w->capsets) {
        size_t cap = w->capsets ? 2 * w->capsets : 8;
        uint64_t **sets = realloc(w->sets, cap * sizeof(uint64_t *));
        if (!sets) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        w->sets = sets;
        w->capsets = cap;
    }
    uint64_t *v = malloc(((size_t)n + 1) * sizeof(uint64_t));
    if (!v) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    w->sets[w->nsets++] = v;
    size_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int kind, minus_one;
        uint64_t x;
        if (bc_int_of(PySequence_Fast_GET_ITEM(seq, i), &kind, &x, &minus_one) < 0) {
            Py_DECREF(seq);
            return -1;
        }
        if (kind == INT_U64)
            v[k++] = x;
    }
    Py_DECREF(seq);
    if (bc_sort_u64s(v, k)) {
        PyErr_NoMemory();
        return -1;
    }
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
        if (m == 0 || v[m - 1] != v[i])
            v[m++] = v[i];
    set->v = v;
    set->n = m;
    return 0;
}

/* The key for this block id (is_top: TOP_LEVEL), made if new. */
static bc_key *bc_key_for(bc_py_want *w, int is_top, uint64_t bid) {
    for (size_t i = 0; i < w->want.nkeys; i++)
        if (w->keys[i].is_top == is_top && (is_top || w->keys[i].bid == bid))
            return &w->keys[i];
    if (w->want.nkeys == w->capkeys) {
        size_t cap = w->capkeys ? 2 * w->capkeys : 8;
        bc_key *keys = realloc(w->keys, cap * sizeof(bc_key));
        if (!keys) {
            PyErr_NoMemory();
            return NULL;
        }
        w->keys = keys;
        w->want.keys = keys;
        w->capkeys = cap;
    }
    bc_key *k = &w->keys[w->want.nkeys++];
    memset(k, 0, sizeof *k);
    k->is_top = is_top;
    k->bid = bid;
    return k;
}

/* One of Want's maps (which: 0 only, 1 unread, 2 first) into the keys. */
static int bc_map_of(bc_py_want *w, PyObject *want, const char *name, int which) {
    PyObject *map = PyObject_GetAttrString(want, name);
    if (!map)
        return -1;
    PyObject *items = PyMapping_Items(map);
    Py_DECREF(map);
    if (!items)
        return -1;
    int rc = -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *pair = PyList_GET_ITEM(items, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "a Want map's items must be pairs");
            goto out;
        }
        int kind, minus_one;
        uint64_t bid;
        if (bc_int_of(PyTuple_GET_ITEM(pair, 0), &kind, &bid, &minus_one) < 0)
            goto out;
        if (!(kind == INT_U64 || minus_one)) /* no block has this id */
            continue;
        bc_key *k = bc_key_for(w, minus_one, minus_one ? 0 : bid);
        if (!k)
            goto out;
        PyObject *value = PyTuple_GET_ITEM(pair, 1);
        if (which == 2) {
            uint64_t limit;
            int m1;
            if (bc_int_of(value, &kind, &limit, &m1) < 0)
                goto out;
            /* entries >= limit: a negative limit is 0, one above 2**64-1 is never reached */
            k->has_first = kind != INT_BIG;
            k->first = kind == INT_U64 ? limit : 0;
        } else if (which == 0) {
            k->has_only = 1;
            if (bc_set_of(w, value, &k->only) < 0)
                goto out;
        } else {
            k->has_unread = 1;
            if (bc_set_of(w, value, &k->unread) < 0)
                goto out;
        }
    }
    rc = 0;
out:
    Py_DECREF(items);
    return rc;
}

static int bc_want_of(bc_py_want *w, PyObject *want) {
    memset(w, 0, sizeof *w);
    PyObject *enter = PyObject_GetAttrString(want, "enter");
    if (!enter)
        return -1;
    int rc = 0;
    if (enter == Py_None)
        w->want.any_enter = 1;
    else
        rc = bc_set_of(w, enter, &w->want.enter);
    Py_DECREF(enter);
    if (rc < 0)
        return -1;
    PyObject *skip = PyObject_GetAttrString(want, "skip");
    if (!skip)
        return -1;
    rc = bc_set_of(w, skip, &w->want.skip);
    Py_DECREF(skip);
    if (rc < 0 || bc_map_of(w, want, "only", 0) < 0 || bc_map_of(w, want, "unread", 1) < 0 ||
        bc_map_of(w, want, "first", 2) < 0)
        return -1;
    PyObject *blobs = PyObject_GetAttrString(want, "blobs");
    if (!blobs)
        return -1;
    w->want.blobs = PyObject_IsTrue(blobs);
    Py_DECREF(blobs);
    return w->want.blobs < 0 ? -1 : 0;
}

/* How Nodes and Blocks are made. Calling a dataclass runs its __init__ in Python, most of the
   time of a read that keeps many small blocks (irmodule._ASM keeps each function's first
   entries): when calling the class is seen to do no more than set the fields on an instance
   object.__new__ makes, in order, the instance is made that way instead. */
typedef struct {
    PyObject *cls;
    const char *const *fields;
    int n;
    int direct;
    PyObject *names[8]; /* the fields, as str: made by bc_maker_check, freed by bc_maker_free */
} bc_maker;

static void bc_maker_free(bc_maker *m) {
    for (int i = 0; i < m->n; i++)
        Py_CLEAR(m->names[i]);
}

static PyObject *bc_make_direct(const bc_maker *m, PyObject *const *args) {
    PyTypeObject *t = (PyTypeObject *)m->cls;
    PyObject *empty = PyTuple_New(0);
    if (!empty)
        return NULL;
    PyObject *obj = t->tp_new(t, empty, NULL);
    Py_DECREF(empty);
    if (!obj)
        return NULL;
    for (int i = 0; i < m->n; i++) {
        if (PyObject_GenericSetAttr(obj, m->names[i], args[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

/* Whether m->cls may be made directly: an instance made so equals, field for field and in its
   __dict__, one the class makes of the same arguments. */
static int bc_maker_check(bc_maker *m) {
    m->direct = 0;
    if (!PyType_Check(m->cls) || ((PyTypeObject *)m->cls)->tp_new != PyBaseObject_Type.tp_new)
        return 0;
    PyObject *args[8] = {NULL}, *called = NULL, *made = NULL, *a = NULL, *b = NULL;
    int n = 0, rc = -1;
    for (int i = 0; i < m->n; i++)
        if (!(m->names[i] = PyUnicode_InternFromString(m->fields[i])))
            goto out;
    for (; n < m->n; n++)
        if (!(args[n] = PyLong_FromLong(1000 + n)))
            goto out;
    if (!(called = PyObject_Vectorcall(m->cls, args, (size_t)m->n, NULL)))
        goto out;
    if (!(made = bc_make_direct(m, args)))
        goto out;
    a = PyObject_GenericGetDict(called, NULL);
    b = a ? PyObject_GenericGetDict(made, NULL) : NULL;
    if (!b)
        goto out;
    PyObject *ka = PyDict_Keys(a), *kb = ka ? PyDict_Keys(b) : NULL;
    int same = kb ? PyObject_RichCompareBool(ka, kb, Py_EQ) : -1;
    Py_XDECREF(ka);
    Py_XDECREF(kb);
    if (same == 1)
        same = PyObject_RichCompareBool(a, b, Py_EQ);
    if (same == 1)
        same = Py_TYPE(called) == Py_TYPE(made) && PyObject_RichCompareBool(called, made, Py_EQ) == 1;
    if (same < 0)
        goto out;
    m->direct = same;
    rc = 0;
out:
    for (int i = 0; i < n; i++)
        Py_DECREF(args[i]);
    Py_XDECREF(called);
    Py_XDECREF(made);
    Py_XDECREF(a);
    Py_XDECREF(b);
    if (rc < 0)
        PyErr_Clear(); /* no direct way then: the class is called */
    return 0;
}

static PyObject *bc_make(const bc_maker *m, PyObject *const *args) {
    return m->direct ? bc_make_direct(m, args) : PyObject_Vectorcall(m->cls, args, (size_t)m->n, NULL);
}

/* Ints below BC_INTS made once a tree: a module's records repeat type and value ids. */
#define BC_INTS 1024

static inline PyObject *bc_int(PyObject **ints, uint64_t x) {
    if (x >= BC_INTS)
        return PyLong_FromUnsignedLongLong(x);
    if (!ints[x] && !(ints[x] = PyLong_FromUnsignedLongLong(x)))
        return NULL;
    Py_INCREF(ints[x]);
    return ints[x];
}

/* The events as Nodes: the root's items, each block a Node(bid, items, Block(...)). */
static PyObject *bc_tree_with(const bc_u64s *out, const bc_maker *Node, const bc_maker *Block, PyObject **ints) {
    PyObject *root_items = PyList_New(0);
    if (!root_items)
        return NULL;
    PyObject *stack[BC_MAX_DEPTH + 2];
    int sp = 0;
    stack[0] = root_items;
    size_t i = 0;
    while (i < out->n) {
        uint64_t h = out->v[i];
        if ((h & 3) == BC_TAG_RECORD) {
            size_t n = (size_t)(h >> 2);
            PyObject *rec = PyList_New((Py_ssize_t)n);
            if (!rec)
                goto fail;
            for (size_t k = 0; k < n; k++) {
                PyObject *x = bc_int(ints, out->v[i + 1 + k]);
                if (!x) {
                    Py_DECREF(rec);
                    goto fail;
                }
                PyList_SET_ITEM(rec, (Py_ssize_t)k, x);
            }
            /* A record holds ints only, so it is in no cycle: left out of the collector's
               walks, which a tree of many thousand records otherwise repeats. */
            PyObject_GC_UnTrack(rec);
            int rc = PyList_Append(stack[sp], rec);
            Py_DECREF(rec);
            if (rc < 0)
                goto fail;
            i += 1 + n;
        } else if ((h & 3) == BC_TAG_BEGIN) {
            PyObject *f[5] = {NULL};
            for (int k = 0; k < 5; k++)
                if (!(f[k] = PyLong_FromUnsignedLongLong(out->v[i + 1 + k]))) {
                    for (int j = 0; j < k; j++)
                        Py_DECREF(f[j]);
                    goto fail;
                }
            PyObject *block = bc_make(Block, f);
            PyObject *items = block ? PyList_New(0) : NULL;
            PyObject *node = NULL;
            if (items) {
                PyObject *args[3] = {f[0], items, block};
                node = bc_make(Node, args);
            }
            for (int k = 0; k < 5; k++)
                Py_DECREF(f[k]);
            Py_XDECREF(block);
            if (!node) {
                Py_XDECREF(items);
                goto fail;
            }
            int rc = PyList_Append(stack[sp], node);
            Py_DECREF(node);
            if (rc < 0) {
                Py_DECREF(items);
                goto fail;
            }
            stack[++sp] = items; /* the node, in its parent's list, holds it too */
            Py_DECREF(items);
            i += 6;
        } else {
            sp--;
            i += 1;
        }
    }
    PyObject *top = PyLong_FromLong(-1);
    if (!top)
        goto fail;
    PyObject *args[3] = {top, root_items, Py_None};
    PyObject *root = bc_make(Node, args);
    Py_DECREF(top);
    Py_DECREF(root_items);
    return root;
fail:
    Py_DECREF(root_items);
    return NULL;
}

static const char *const bc_node_fields[] = {"bid", "items", "block"};
static const char *const bc_block_fields[] = {"bid", "width", "length_at", "start", "end"};

static PyObject *bc_tree(const bc_u64s *out, PyObject *Node, PyObject *Block) {
    bc_maker node = {Node, bc_node_fields, 3, 0, {NULL}}, block = {Block, bc_block_fields, 5, 0, {NULL}};
    /* Checked once a tree of more than a few blocks: a small read calls the classes. */
    size_t blocks = 0;
    for (size_t i = 0; i < out->n && blocks < 8; i += (out->v[i] & 3) == BC_TAG_RECORD ? 1 + (size_t)(out->v[i] >> 2)
                                                   : (out->v[i] & 3) == BC_TAG_BEGIN ? 6 : 1)
        blocks += (out->v[i] & 3) == BC_TAG_BEGIN;
    if (blocks >= 8) {
        bc_maker_check(&node);
        bc_maker_check(&block);
    }
    PyObject **ints = calloc(BC_INTS, sizeof(PyObject *));
    if (!ints) {
        bc_maker_free(&node);
        bc_maker_free(&block);
        return PyErr_NoMemory();
    }
    PyObject *tree = bc_tree_with(out, &node, &block, ints);
    bc_maker_free(&node);
    bc_maker_free(&block);
    for (size_t i = 0; i < BC_INTS; i++)
        Py_XDECREF(ints[i]);
    free(ints);
    return tree;
}

static PyObject *bc_py_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "read(stream, want, Node, Block, BadBitcode)");
        return NULL;
    }
    bc_py_want w;
    if (bc_want_of(&w, args[1]) < 0) {
        bc_py_want_free(&w);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        bc_py_want_free(&w);
        return NULL;
    }
    bc_u64s out = {0};
    char error[96];
    int e;
    Py_BEGIN_ALLOW_THREADS
    e = bc_read(view.buf, (size_t)view.len, &w.want, &out, error, sizeof error);
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (e == BC_OK)
        result = bc_tree(&out, args[2], args[3]);
    else if (e == BC_BAD)
        PyErr_SetString(args[4], error);
    else
        PyErr_NoMemory();
    free(out.v);
    PyBuffer_Release(&view);
    bc_py_want_free(&w);
    return result;
}

/* The callbacks of bc_shard_text, in Python: shardkey.canonical's digest_of, interface_of and
   block_count_read, and the dicts of their answers already known by path (`known`, each NULL
   if not given), looked up first: a shard names hundreds of modules, each a call otherwise.
   A name is taken as f"{name}" takes it (format()), and only when ASCII. */
typedef struct {
    PyObject *digest_of, *interface_of, *block_count_read;
    PyObject *known[2]; /* by digest, by interface */
} bc_py_shard;

static int bc_py_name(void *ctx, int by_interface, const uint8_t *path, size_t n, bc_text *out) {
    bc_py_shard *p = ctx;
    PyObject *name = PyUnicode_DecodeUTF8((const char *)path, (Py_ssize_t)n, "surrogateescape");
    if (!name)
        return BC_CALLBACK;
    PyObject *known = p->known[by_interface ? 1 : 0];
    PyObject *got = known ? PyDict_GetItemWithError(known, name) : NULL;
    if (got && PyUnicode_CheckExact(got))
        Py_INCREF(got);
    else if (PyErr_Occurred())
        got = NULL;
    else
        got = PyObject_CallOneArg(by_interface ? p->interface_of : p->digest_of, name);
    Py_DECREF(name);
    if (!got)
        return BC_CALLBACK;
    PyObject *text = PyObject_Format(got, NULL);
    Py_DECREF(got);
    if (!text)
        return BC_CALLBACK;
    int e = BC_DEFER;
    if (PyUnicode_IS_ASCII(text)) {
        bc_put(out, PyUnicode_DATA(text), (size_t)PyUnicode_GET_LENGTH(text));
        e = BC_OK;
    }
    Py_DECREF(text);
    return e;
}

static int bc_py_block_count_read(void *ctx, int *answer) {
    bc_py_shard *p = ctx;
    PyObject *got = PyObject_CallNoArgs(p->block_count_read);
    if (!got)
        return BC_CALLBACK;
    int t = PyObject_IsTrue(got);
    Py_DECREF(got);
    if (t < 0)
        return BC_CALLBACK;
    *answer = t;
    return BC_OK;
}

/* A tuple of ints as a bc_set (malloc'd into *v). */
static int bc_py_versions(PyObject *tuple, uint64_t **v, bc_set *set) {
    if (!PyTuple_Check(tuple)) {
        PyErr_SetString(PyExc_TypeError, "shard tables: versions must be a tuple");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    *v = malloc(((size_t)n + 1) * sizeof(uint64_t));
    if (!*v) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        (*v)[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(tuple, i));
        if (PyErr_Occurred())
            return -1;
    }
    if (bc_sort_u64s(*v, (size_t)n)) {
        PyErr_NoMemory();
        return -1;
    }
    size_t m = 0; /* distinct, as a bc_set is */
    for (size_t i = 0; i < (size_t)n; i++)
        if (m == 0 || (*v)[m - 1] != (*v)[i])
            (*v)[m++] = (*v)[i];
    set->v = *v;
    set->n = m;
    return 0;
}

/* digest(text), the text given as bytes: no str of it is made, nor bytes of that str (a shard's
   text is tens of kilobytes, and its key needs only the digest). */
static PyObject *bc_py_digest_text(PyObject *digest, const bc_text *t) {
    PyObject *bytes = PyBytes_FromStringAndSize(t->p, (Py_ssize_t)t->n);
    if (!bytes)
        return NULL;
    PyObject *result = PyObject_CallOneArg(digest, bytes);
    Py_DECREF(bytes);
    return result;
}

static PyObject *bc_py_shard_text(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    PyObject *known_by[2] = {NULL, NULL};
    PyObject *digest = nargs == 9 && args[8] != Py_None ? args[8] : NULL;
    if (nargs >= 8 && args[7] != Py_None) {
        if (!PyTuple_Check(args[7]) || PyTuple_GET_SIZE(args[7]) != 2 || !PyDict_Check(PyTuple_GET_ITEM(args[7], 0)) ||
            !PyDict_Check(PyTuple_GET_ITEM(args[7], 1))) {
            PyErr_SetString(PyExc_TypeError, "shard_text: known must be None or (digests by path, interfaces by path)");
            return NULL;
        }
        known_by[0] = PyTuple_GET_ITEM(args[7], 0);
        known_by[1] = PyTuple_GET_ITEM(args[7], 1);
    }
    if (nargs < 7 || nargs > 9 || !PyTuple_Check(args[6]) || PyTuple_GET_SIZE(args[6]) != 5) {
        PyErr_SetString(PyExc_TypeError, "shard_text(stream, own, digest_of, interface_of, block_count_read, "
                                         "BadBitcode, (format, unread_line, known, declaration, split_since)"
                                         "[, known[, digest]])");
        return NULL;
    }
    PyObject *tables_in = args[6];
    bc_shard_tables tables;
    memset(&tables, 0, sizeof tables);
    uint64_t *known = NULL, *declaration = NULL;
    PyObject *result = NULL;
    Py_buffer view = {0}, own = {0};
    int has_own = args[1] != Py_None;
    tables.format = PyUnicode_AsUTF8(PyTuple_GET_ITEM(tables_in, 0));
    tables.unread_line = tables.format ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(tables_in, 1)) : NULL;
    tables.split_since = tables.unread_line ? PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(tables_in, 4)) : 0;
    if (tables.unread_line && !(PyUnicode_IS_ASCII(PyTuple_GET_ITEM(tables_in, 0)) &&
                                PyUnicode_IS_ASCII(PyTuple_GET_ITEM(tables_in, 1)))) {
        result = Py_NewRef(Py_NotImplemented); /* the text is made an ASCII str: tables that are not, in Python */
        goto out;
    }
    if (!tables.unread_line || PyErr_Occurred() ||
        bc_py_versions(PyTuple_GET_ITEM(tables_in, 2), &known, &tables.known) < 0 ||
        bc_py_versions(PyTuple_GET_ITEM(tables_in, 3), &declaration, &tables.declaration) < 0)
        goto out;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        goto out;
    if (has_own && PyObject_GetBuffer(args[1], &own, PyBUF_SIMPLE) < 0)
        goto out;
    bc_want want;
    memset(&want, 0, sizeof want);
    want.any_enter = 1;
    want.blobs = 1;
    bc_u64s events = {0};
    char error[96];
    int e;
    (void)bc_reserve(&events, (uint64_t)view.len); /* a whole read makes about 2 words for 3 bytes:
                                                      room at once, since each growth copies them */
    Py_BEGIN_ALLOW_THREADS
    e = bc_read(view.buf, (size_t)view.len, &want, &events, error, sizeof error);
    Py_END_ALLOW_THREADS
    if (e == BC_OK) {
        bc_py_shard callbacks = {args[2], args[3], args[4], {known_by[0], known_by[1]}};
        bc_shard_env env = {&callbacks, bc_py_name, args[3] != Py_None,
                            args[4] != Py_None ? bc_py_block_count_read : NULL};
        bc_text text = {0};
        e = bc_shard_text(&events, &tables, &env, has_own ? own.buf : NULL, has_own ? (size_t)own.len : 0, has_own,
                          &text, error, sizeof error);
        if (e == BC_OK && digest) {
            result = bc_py_digest_text(digest, &text);
        } else if (e == BC_OK) {
            result = PyUnicode_New((Py_ssize_t)text.n, 127);
            if (result)
                memcpy(PyUnicode_DATA(result), text.p, text.n);
        } else if (e == BC_DEFER) {
            result = Py_NewRef(Py_NotImplemented);
        }
        bc_text_free(&text);
    }
    free(events.v);
    if (e == BC_BAD)
        PyErr_SetString(args[5], error);
    else if (e == BC_NOMEM)
        PyErr_NoMemory();
out:
    if (view.obj)
        PyBuffer_Release(&view);
    if (own.obj)
        PyBuffer_Release(&own);
    free(known);
    free(declaration);
    return result;
}

/* interface._tables() and irmodule._tables() (see there) as bc_facts_tables: sets in the arena,
   the rest in *held (freed by the caller) or in the tuples. 1: a table the text cannot hold (not
   ASCII), for the Python one; -1 with an exception set. */
typedef struct {
    uint64_t *primitive, *asm_codes, *asm_at;
    const char **primitive_names;
} bc_py_held;

static int bc_py_ints(bc_py_want *arena, PyObject *tuple, bc_set *set) {
    return bc_set_of(arena, tuple, set);
}

static int bc_py_facts_tables(PyObject *iface, PyObject *ir, bc_py_want *arena, bc_py_held *held,
                              bc_facts_tables *tb) {
    if (!PyTuple_Check(iface) || PyTuple_GET_SIZE(iface) != 15 || !PyTuple_Check(ir) || PyTuple_GET_SIZE(ir) != 4) {
        PyErr_SetString(PyExc_TypeError, "module_facts: interface._tables() and irmodule._tables() expected");
        return -1;
    }
    PyObject *format = PyTuple_GET_ITEM(iface, 0), *primitive = PyTuple_GET_ITEM(iface, 9);
    PyObject *intrinsic = PyTuple_GET_ITEM(iface, 14), *flags = PyTuple_GET_ITEM(ir, 2);
    PyObject *asm_items = PyTuple_GET_ITEM(ir, 0);
    if (!PyUnicode_Check(format) || !PyTuple_Check(primitive) || !PyBytes_Check(intrinsic) || !PyBytes_Check(flags) ||
        !PyTuple_Check(asm_items)) {
        PyErr_SetString(PyExc_TypeError, "module_facts: tables of the wrong shape");
        return -1;
    }
    if (!PyUnicode_IS_ASCII(format))
        return 1;
    tb->format = PyUnicode_AsUTF8(format);
    if (!tb->format)
        return -1;
    static const int sets[] = {1, 2, 3, 4, 5, 6, 8, 10, 11, 12};
    bc_set *to[] = {&tb->raw_blocks, &tb->passed_blocks, &tb->kept_codes, &tb->dropped_codes, &tb->globals_read,
                    &tb->local_linkages, &tb->known_linkages, &tb->simple_constants, &tb->md_debug, &tb->md_known};
    for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++)
        if (bc_py_ints(arena, PyTuple_GET_ITEM(iface, sets[k]), to[k]) < 0)
            return -1;
    if (bc_py_ints(arena, PyTuple_GET_ITEM(ir, 1), &tb->md_no_id) < 0 ||
        bc_py_ints(arena, PyTuple_GET_ITEM(ir, 3), &tb->global_value_codes) < 0)
        return -1;
    tb->appending = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(iface, 7));
    tb->max_depth = PyErr_Occurred() ? 0 : PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(iface, 13));
    if (PyErr_Occurred())
        return -1;
    Py_ssize_t np = PyTuple_GET_SIZE(primitive), na = PyTuple_GET_SIZE(asm_items);
    held->primitive = malloc(((size_t)np + 1) * sizeof(uint64_t));
    held->primitive_names = malloc(((size_t)np + 1) * sizeof(char *));
    held->asm_codes = malloc(((size_t)na + 1) * sizeof(uint64_t));
    held->asm_at = malloc(((size_t)na + 1) * sizeof(uint64_t));
    if (!held->primitive || !held->primitive_names || !held->asm_codes || !held->asm_at) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < np; k++) {
        PyObject *pair = PyTuple_GET_ITEM(primitive, k);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "module_facts: PRIMITIVE_TYPES of the wrong shape");
            return -1;
        }
        if (!PyUnicode_IS_ASCII(PyTuple_GET_ITEM(pair, 1)))
            return 1;
        held->primitive[k] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pair, 0));
        held->primitive_names[k] = PyUnicode_AsUTF8(PyTuple_GET_ITEM(pair, 1));
        if (PyErr_Occurred())
            return -1;
    }
    for (Py_ssize_t k = 0; k < na; k++) {
        PyObject *pair = PyTuple_GET_ITEM(asm_items, k);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "module_facts: INLINE_ASM of the wrong shape");
            return -1;
        }
        held->asm_codes[k] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pair, 0));
        held->asm_at[k] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pair, 1));
        if (PyErr_Occurred())
            return -1;
    }
    tb->primitive = held->primitive;
    tb->primitive_names = held->primitive_names;
    tb->nprimitive = (size_t)np;
    tb->asm_codes = held->asm_codes;
    tb->asm_at = held->asm_at;
    tb->nasm = (size_t)na;
    tb->intrinsic = (const uint8_t *)PyBytes_AS_STRING(intrinsic);
    tb->nintrinsic = (size_t)PyBytes_GET_SIZE(intrinsic);
    tb->module_flags = (const uint8_t *)PyBytes_AS_STRING(flags);
    tb->nmodule_flags = (size_t)PyBytes_GET_SIZE(flags);
    return 0;
}

/* The facts as modulefacts.read takes them: (interface text, module asm, templates, string table
   or None, triple, ((flag name, value), ...), producer), strings as bytes. */
static PyObject *bc_py_facts_result(const bc_facts_out *o) {
    PyObject *text = PyUnicode_New((Py_ssize_t)o->interface.n, 127);
    if (!text)
        return NULL;
    if (o->interface.n)
        memcpy(PyUnicode_DATA(text), o->interface.p, o->interface.n);
    PyObject *lists[3] = {PyList_New(0), PyList_New(0), PyList_New(0)}; /* asm, templates, flags */
    PyObject *strtab = Py_NewRef(Py_None), *triple = NULL, *producer = NULL, *result = NULL;
    if (!lists[0] || !lists[1] || !lists[2])
        goto out;
    for (size_t k = 0; k < o->n; k++) {
        const bc_fact *fc = &o->facts[k];
        PyObject *b = PyBytes_FromStringAndSize(o->bytes.p ? o->bytes.p + fc->at : "", (Py_ssize_t)fc->n);
        if (!b)
            goto out;
        int rc = 0;
        if (fc->kind == FACT_ASM || fc->kind == FACT_TEMPLATE) {
            rc = PyList_Append(lists[fc->kind == FACT_TEMPLATE], b);
            Py_DECREF(b);
        } else if (fc->kind == FACT_FLAG) {
            PyObject *pair = Py_BuildValue("(NL)", b, (long long)fc->value);
            rc = pair ? PyList_Append(lists[2], pair) : -1;
            Py_XDECREF(pair);
        } else if (fc->kind == FACT_STRTAB) {
            Py_SETREF(strtab, b);
        } else if (fc->kind == FACT_TRIPLE) {
            Py_XSETREF(triple, b);
        } else {
            Py_XSETREF(producer, b);
        }
        if (rc < 0)
            goto out;
    }
    if (!triple || !producer) {
        PyErr_SetString(PyExc_SystemError, "module_facts: no triple or producer");
        goto out;
    }
    for (int k = 0; k < 3; k++)
        Py_SETREF(lists[k], PyList_AsTuple(lists[k]));
    if (lists[0] && lists[1] && lists[2])
        result = PyTuple_Pack(7, text, lists[0], lists[1], strtab, triple, lists[2], producer);
out:
    Py_DECREF(text);
    for (int k = 0; k < 3; k++)
        Py_XDECREF(lists[k]);
    Py_XDECREF(strtab);
    Py_XDECREF(triple);
    Py_XDECREF(producer);
    return result;
}

static PyObject *bc_py_module_facts(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "module_facts(stream, want, whole, interface_tables, irmodule_tables, "
                                         "BadBitcode)");
        return NULL;
    }
    bc_py_want want, whole, arena;
    memset(&want, 0, sizeof want);
    memset(&whole, 0, sizeof whole);
    memset(&arena, 0, sizeof arena);
    bc_py_held held;
    memset(&held, 0, sizeof held);
    PyObject *result = NULL;
    Py_buffer view = {0};
    if (bc_want_of(&want, args[1]) < 0 || bc_want_of(&whole, args[2]) < 0)
        goto out;
    bc_facts_tables tables;
    memset(&tables, 0, sizeof tables);
    int t = bc_py_facts_tables(args[3], args[4], &arena, &held, &tables);
    if (t < 0)
        goto out;
    if (t > 0) {
        result = Py_NewRef(Py_NotImplemented);
        goto out;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        goto out;
    bc_facts_out facts;
    memset(&facts, 0, sizeof facts);
    char error[96];
    int e;
    Py_BEGIN_ALLOW_THREADS
    e = bc_module_facts(view.buf, (size_t)view.len, &want.want, &whole.want, &tables, &facts, error, sizeof error);
    Py_END_ALLOW_THREADS
    if (e == BC_OK)
        result = bc_py_facts_result(&facts);
    else if (e == BC_DEFER)
        result = Py_NewRef(Py_NotImplemented);
    else if (e == BC_BAD)
        PyErr_SetString(args[5], error);
    else
        PyErr_NoMemory();
    bc_facts_out_free(&facts);
out:
    if (view.obj)
        PyBuffer_Release(&view);
    bc_py_want_free(&want);
    bc_py_want_free(&whole);
    bc_py_want_free(&arena);
    free(held.primitive);
    free(held.primitive_names);
    free(held.asm_codes);
    free(held.asm_at);
    return result;
}

/* Strtab.of, compiled: strtab_paths(stream, want, BadBitcode), the paths of the entries of the stream's
   MODULE_STRTAB (read as want, bitcode._STRTAB_WANT, says), each decoded as Strtab decodes it (UTF-8,
   surrogate-escaped). Strtab.of and relocate each take microseconds: they keep the GIL. */
static PyObject *bc_py_strtab_paths(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "strtab_paths(stream, want, BadBitcode)");
        return NULL;
    }
    bc_py_want w;
    Py_buffer view = {0};
    PyObject *result = NULL;
    if (bc_want_of(&w, args[1]) < 0 || PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        goto out;
    bc_u64s ev = {0};
    bc_strtab st;
    char error[96];
    int e = bc_strtab_read(view.buf, (size_t)view.len, &w.want, &ev, &st, error, sizeof error);
    if (e == BC_OK) {
        result = PyList_New((Py_ssize_t)st.entries);
        bc_text path = {0};
        size_t k = 0;
        if (result && st.found) {
            const uint64_t *v = ev.v;
            BC_CHILDREN(v, st.b, i) {
                if (!bc_is_entry(v, i))
                    continue;
                size_t n = BC_COUNT(v, i) - 2;
                if (n > path.cap && bc_room(&path, n)) {
                    PyErr_NoMemory();
                    Py_CLEAR(result);
                    break;
                }
                for (size_t j = 0; j < n; j++)
                    path.p[j] = (char)v[i + 3 + j];
                PyObject *s = PyUnicode_DecodeUTF8(n ? path.p : "", (Py_ssize_t)n, "surrogateescape");
                if (!s) {
                    Py_CLEAR(result);
                    break;
                }
                PyList_SET_ITEM(result, (Py_ssize_t)k++, s);
            }
        }
        bc_text_free(&path);
    } else if (e == BC_BAD) {
        PyErr_SetString(args[2], error);
    } else {
        PyErr_NoMemory();
    }
    free(ev.v);
out:
    if (view.obj)
        PyBuffer_Release(&view);
    bc_py_want_free(&w);
    return result;
}

/* Strtab.relocate, compiled: strtab_relocate(stream, want, names, BadBitcode), the stream with the
   entries of its MODULE_STRTAB naming `names` (bytes, one an entry, in order), or NotImplemented
   where the Python one must write it (bc_strtab_relocate's BC_DEFER). */
static PyObject *bc_py_strtab_relocate(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "strtab_relocate(stream, want, names, BadBitcode)");
        return NULL;
    }
    bc_py_want w;
    Py_buffer view = {0};
    PyObject *result = NULL, *seq = NULL;
    bc_name *names = NULL;
    bc_u64s ev = {0};
    if (bc_want_of(&w, args[1]) < 0 || !(seq = PySequence_Fast(args[2], "strtab_relocate: names must be a list")) ||
        PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        goto out;
    bc_strtab st;
    char error[96];
    int e = bc_strtab_read(view.buf, (size_t)view.len, &w.want, &ev, &st, error, sizeof error);
    if (e == BC_OK) {
        size_t n = (size_t)PySequence_Fast_GET_SIZE(seq);
        if (n != st.entries) {
            PyErr_Format(PyExc_ValueError, "strtab_relocate: %zu names for %zu paths", n, st.entries);
            goto out;
        }
        if (!(names = malloc((n ? n : 1) * sizeof *names))) {
            PyErr_NoMemory();
            goto out;
        }
        for (size_t k = 0; k < n; k++) {
            PyObject *name = PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)k);
            if (!PyBytes_Check(name)) {
                PyErr_SetString(PyExc_TypeError, "strtab_relocate: a name that is not bytes");
                goto out;
            }
            names[k].p = (const uint8_t *)PyBytes_AS_STRING(name);
            names[k].n = (size_t)PyBytes_GET_SIZE(name);
        }
        bc_text moved = {0};
        e = bc_strtab_relocate(view.buf, (size_t)view.len, ev.v, &st, names, &moved, error, sizeof error);
        if (e == BC_OK)
            result = PyBytes_FromStringAndSize(moved.p, (Py_ssize_t)moved.n);
        else if (e == BC_DEFER)
            result = Py_NewRef(Py_NotImplemented);
        bc_text_free(&moved);
    }
    if (e == BC_BAD)
        PyErr_SetString(args[3], error);
    else if (e == BC_NOMEM)
        PyErr_NoMemory();
out:
    free(names);
    free(ev.v);
    Py_XDECREF(seq);
    if (view.obj)
        PyBuffer_Release(&view);
    bc_py_want_free(&w);
    return result;
}

static PyMethodDef bc_methods[] = {
    {"read", (PyCFunction)(void (*)(void))bc_py_read, METH_FASTCALL,
     "read(stream, want, Node, Block, BadBitcode) -> Node: bitcode.read_python, compiled."},
    {"shard_text", (PyCFunction)(void (*)(void))bc_py_shard_text, METH_FASTCALL,
     "shard_text(stream, own, digest_of, interface_of, block_count_read, BadBitcode, tables[, known[, digest]]) -> "
     "str, or NotImplemented where the Python one must run: shardkey.canonical_python, compiled. known: None or "
     "(digest_of's answers by path, interface_of's), looked up before calling them. digest: None, or a callable "
     "whose answer for the text's bytes is returned instead of the text."},
    {"module_facts", (PyCFunction)(void (*)(void))bc_py_module_facts, METH_FASTCALL,
     "module_facts(stream, want, whole, interface_tables, irmodule_tables, BadBitcode) -> tuple, or NotImplemented "
     "where the Python one must run: modulefacts.read_python's parts, compiled."},
    {"strtab_paths", (PyCFunction)(void (*)(void))bc_py_strtab_paths, METH_FASTCALL,
     "strtab_paths(stream, want, BadBitcode) -> list of str: bitcode.Strtab.of's paths, compiled."},
    {"strtab_relocate", (PyCFunction)(void (*)(void))bc_py_strtab_relocate, METH_FASTCALL,
     "strtab_relocate(stream, want, names, BadBitcode) -> bytes, or NotImplemented where the Python one must "
     "write it: bitcode.Strtab.relocate, compiled, each entry's new path given encoded, in order."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef bc_module = {
    PyModuleDef_HEAD_INIT, "ltowrap._bitcode", "The compiled LLVM bitstream reader (ltowrap/formats/bitcode.py).",
    0, bc_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__bitcode(void) {
    return PyModuleDef_Init(&bc_module);
}
#endif
