/* A libFuzzer target over the core of the compiled bitstream reader (ltowrap/_bitcode.c,
   without its Python layer): any bytes, under any Want, are read or refused, never a crash,
   an out-of-bounds access, undefined behaviour, a leak or a hang. The same bytes read whole
   then go through the shard's canonical text (bc_shard_text, with callbacks of C here), under
   the same rule.

   An input is four bytes that choose a Want, then the stream (from its magic on, as
   bitcode.bitstream() gives it; the reader starts at bit 32 and does not look at the magic).
   tests/test_bitcode_native.py builds this and runs it a bounded number of times on a seed
   corpus of the suite's modules and shards. By hand:

     clang-22 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
         dev/fuzz/bitcode_fuzz.c -o bitcode_fuzz
     ./bitcode_fuzz -max_total_time=300 CORPUS_DIR
*/

#define LTOWRAP_BITCODE_CORE_ONLY
#include "../../ltowrap/_bitcode.c"

#include <stdio.h>

/* Block ids a Want may name, sorted: BLOCKINFO, MODULE, CONSTANTS, FUNCTION, IDENTIFICATION,
   METADATA, MODULE_STRTAB, GLOBALVAL_SUMMARY. */
static const uint64_t IDS[8] = {0, 8, 11, 12, 13, 15, 19, 20};
/* Record codes a Want may name, sorted; 35 is METADATA_STRINGS, 300 one past the bit mask. */
static const uint64_t CODES[8] = {1, 2, 3, 4, 7, 23, 35, 300};

static size_t subset(uint8_t bits, const uint64_t *from, uint64_t *to) {
    size_t n = 0;
    for (int i = 0; i < 8; i++)
        if ((bits >> i) & 1)
            to[n++] = from[i];
    return n;
}

/* The events must nest and hold what their headers say. */
static void check_events(const bc_u64s *out) {
    size_t i = 0;
    int depth = 0;
    while (i < out->n) {
        uint64_t h = out->v[i];
        switch (h & 3) {
        case BC_TAG_RECORD:
            if ((h >> 2) == 0 || (h >> 2) > out->n - i - 1)
                abort();
            i += 1 + (size_t)(h >> 2);
            break;
        case BC_TAG_BEGIN:
            if (out->n - i < 6 || ++depth > BC_MAX_DEPTH)
                abort();
            i += 6;
            break;
        case BC_TAG_END:
            if (--depth < 0)
                abort();
            i += 1;
            break;
        default:
            abort();
        }
    }
    if (depth != 0)
        abort();
}

/* shardkey.py's tables, as shardkey._tables() gives them. */
static const uint64_t KNOWN[3] = {9, 10, 12};
static const uint64_t DECLARATION[2] = {10, 12};

/* A module's name: a hash of its path (a path starting with 'Z' is handed over, as a name that
   is not ASCII is). */
static int fuzz_name(void *ctx, int by_interface, const uint8_t *path, size_t n, bc_text *out) {
    (void)ctx;
    if (n && path[0] == 'Z')
        return BC_DEFER;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ path[i]) * 1099511628211ULL;
    bc_puts(out, by_interface ? "i" : "d");
    bc_putu(out, h);
    return BC_OK;
}

static int fuzz_block_count_read(void *ctx, int *answer) {
    *answer = *(const uint8_t *)ctx & 1;
    return BC_OK;
}

/* The stream read whole, as shard_text reads it, then its canonical text: a text is ASCII lines
   under the format's, a refusal says why. */
static void shard_text(const uint8_t *data, size_t size, uint8_t how) {
    bc_want whole = {0};
    whole.any_enter = 1;
    whole.blobs = 1;
    bc_u64s events = {0};
    char error[96];
    if (bc_read(data, size, &whole, &events, error, sizeof error) == BC_OK) {
        check_events(&events);
        bc_shard_tables tables = {"shardkey 4", "block count: not read", {KNOWN, 3}, {DECLARATION, 2}, 11};
        bc_shard_env env = {&how, fuzz_name, (how >> 5) & 1, (how >> 6) & 1 ? fuzz_block_count_read : NULL};
        bc_text text = {0};
        const uint8_t own[] = "a.o";
        int e = bc_shard_text(&events, &tables, &env, own, (how >> 4) & 1 ? 3 : 0, (how >> 3) & 1, &text, error,
                              sizeof error);
        if (e == BC_OK) {
            if (text.failed || text.n < 11 || memcmp(text.p, "shardkey 4\n", 11) || text.p[text.n - 1] != '\n')
                abort();
            for (size_t i = 0; i < text.n; i++)
                if (text.p[i] & 0x80)
                    abort();
        } else if ((e == BC_BAD && !error[0]) || (e != BC_BAD && e != BC_DEFER && e != BC_NOMEM)) {
            abort();
        }
        bc_text_free(&text);
    }
    free(events.v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4)
        return 0;
    uint8_t how = data[0], enter_bits = data[1], skip_bits = data[2], key_bits = data[3];
    uint64_t enter[8], skip[8], only[8], unread[8];
    size_t n_enter = subset(enter_bits, IDS, enter), n_skip = subset(skip_bits, IDS, skip);
    size_t n_only = subset(enter_bits ^ skip_bits, CODES, only), n_unread = subset(key_bits, CODES, unread);
    bc_key keys[2] = {0};
    keys[0].is_top = key_bits & 1;
    keys[0].bid = IDS[(key_bits >> 1) & 7];
    keys[0].has_first = (key_bits >> 4) & 1;
    keys[0].first = key_bits >> 5;
    keys[0].has_only = (how >> 2) & 1;
    keys[0].only = (bc_set){only, n_only};
    keys[1].bid = IDS[(how >> 4) & 7];
    keys[1].has_unread = (how >> 3) & 1;
    keys[1].unread = (bc_set){unread, n_unread};
    keys[1].has_first = how >> 7;
    keys[1].first = 0;
    bc_want want = {0};
    want.blobs = how & 1;
    want.any_enter = (how >> 1) & 1;
    want.enter = (bc_set){enter, n_enter};
    want.skip = (bc_set){skip, n_skip};
    want.keys = keys;
    want.nkeys = keys[1].bid == keys[0].bid && !keys[0].is_top ? 1 : 2;
    bc_u64s out = {0};
    char error[96];
    int e = bc_read(data + 4, size - 4, &want, &out, error, sizeof error);
    if (e == BC_OK)
        check_events(&out);
    else if (e == BC_BAD && !error[0])
        abort();
    free(out.v);
    shard_text(data + 4, size - 4, how);
    return 0;
}
