/* ltowrap._bitcode: bitcode.read() in C.

   The same walk as ltowrap/formats/bitcode.py's read_python, rule for rule: the Python one
   is the reference, and tests/test_bitcode_native.py holds this one to it (equal trees,
   and BadBitcode for the same streams under the same Want).

   Two layers. The core (bc_read and what it calls) uses no Python API: it decodes the
   stream into a flat buffer of 64-bit words (bc_out: records, block starts and ends) or
   says why the stream is refused. dev/fuzz/bitcode_fuzz.c includes this file with
   LTOWRAP_BITCODE_CORE_ONLY defined and fuzzes the core alone. The Python layer at the
   end turns a Want into a bc_want and the buffer into Nodes.

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

/* --- what is wanted ------------------------------------------------------------------------------ */

typedef struct {
    const uint64_t *v; /* sorted, distinct */
    size_t n;
} bc_set;

static int bc_in(const bc_set *s, uint64_t x) {
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->v[mid] == x)
            return 1;
        if (s->v[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
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

/* Reader.vbr, 2 <= n <= 32: no chunk starts at bit 64 or above, and the value is below 2**64. */
static int bc_vbr_chunks(bc_ctx *c, bc_cursor *r, unsigned n, uint64_t *out) {
    uint64_t hi = (uint64_t)1 << (n - 1), value = 0, chunk;
    unsigned shift = 0;
    if (bc_has(r, 57)) { /* a value within one window: below bit 57, nothing to check */
        uint64_t window = bc_peek(c, r->pos);
        for (unsigned used = 0; used + n <= 57; used += n, shift += n - 1) {
            chunk = (window >> used) & ((hi << 1) - 1);
            value |= (chunk & (hi - 1)) << shift;
            if (!(chunk & hi)) {
                r->pos += used + n;
                *out = value;
                return BC_OK;
            }
        }
        value = 0;
        shift = 0;
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
        /* One-chunk values cut from one 57-bit window while they last, any other read alone. */
        unsigned wd = (unsigned)width;
        uint64_t hi = (uint64_t)1 << (wd - 1), mask = (hi << 1) - 1, i = 0;
        while (i < n) {
            if (bc_has(r, 57)) {
                uint64_t window = bc_peek(c, r->pos);
                unsigned used = 0;
                while (i < n && used + wd <= 57) {
                    uint64_t chunk = (window >> used) & mask;
                    if (chunk & hi)
                        break;
                    v[i++] = chunk;
                    used += wd;
                }
                r->pos += used;
                if (i == n || used + wd > 57)
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

static int bc_cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
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
    qsort(v, k, sizeof(uint64_t), bc_cmp_u64);
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

static PyMethodDef bc_methods[] = {
    {"read", (PyCFunction)(void (*)(void))bc_py_read, METH_FASTCALL,
     "read(stream, want, Node, Block, BadBitcode) -> Node: bitcode.read_python, compiled."},
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
