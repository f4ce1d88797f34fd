/* A libFuzzer target over the core of the compiled bitstream reader (ltowrap/_bitcode.c,
   without its Python layer): any bytes, under any Want, are read or refused, never a crash,
   an out-of-bounds access, undefined behaviour, a leak or a hang. The same bytes read whole
   then go through the shard's canonical text (bc_shard_text, with callbacks of C here), and
   through a module's facts (bc_module_facts, its reads as modulefacts.read asks them or, for
   some inputs, under the input's Want), and through a shard's module paths read and rewritten
   (bc_strtab_read, bc_strtab_relocate), under the same rule.

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

/* interface.py's and irmodule.py's tables, as interface._tables() and irmodule._tables() give them
   (sorted), and modulefacts.WANT and interface._WHOLE. */
static const uint64_t RAW_BLOCKS[] = {21, 22, 26};
static const uint64_t PASSED_BLOCKS[] = {0, 9, 10, 11, 12, 14, 15, 17, 20};
static const uint64_t KEPT_CODES[] = {1, 2, 3, 4, 6, 16};
static const uint64_t DROPPED_CODES[] = {5, 11, 12, 13, 17};
static const uint64_t GLOBALS_READ[] = {7, 8, 14, 18};
static const uint64_t LOCAL_LINKAGES[] = {3, 9, 13, 14};
static const uint64_t KNOWN_LINKAGES[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
static const uint64_t PRIMITIVE[] = {2, 3, 4, 5, 10, 13, 14, 15, 16, 17, 22, 23, 24};
static const char *const PRIMITIVE_NAMES[] = {"void", "float", "double", "label", "half", "x86_fp80", "fp128",
                                              "ppc_fp128", "metadata", "x86_mmx", "token", "bfloat", "x86_amx"};
static const uint64_t SIMPLE_CONSTANTS[] = {2, 3, 4, 5, 6, 26};
static const uint64_t MD_DEBUG[] = {7, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28,
                                    29, 30, 31, 32, 33, 34, 37, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49};
static const uint64_t MD_KNOWN[] = {2, 3, 4, 5, 6, 7, 10, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
                                    26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45,
                                    46, 47, 48, 49};
static const uint64_t ASM_CODES[] = {18, 23, 28, 30}, ASM_AT[] = {1, 1, 1, 2};
static const uint64_t MD_NO_ID[] = {4, 6, 10, 11, 35, 36, 38, 39};
static const uint64_t GLOBAL_VALUE_CODES[] = {7, 8, 9, 14, 18};
static const uint64_t FACTS_SKIP[] = {14}, WHOLE_SKIP[] = {12, 14, 20};
static const uint64_t FACTS_CONSTANTS[] = {1, 2, 3, 4, 5, 6, 18, 23, 26, 28, 30};
#define N(a) (sizeof(a) / sizeof((a)[0]))
#define SET(a) ((bc_set){a, N(a)})

/* The stream's facts, as modulefacts.read asks them (first read under `first`: modulefacts.WANT,
   or the input's own Want), the second read under `whole` (interface._WHOLE, or the input's
   Want): facts are an ASCII interface text under its first line and strings within their
   buffer, a refusal says why. */
static void module_facts(const uint8_t *data, size_t size, const bc_want *own, uint8_t how) {
    bc_facts_tables tables = {
        "shardkey 4", SET(RAW_BLOCKS), SET(PASSED_BLOCKS), SET(KEPT_CODES), SET(DROPPED_CODES), SET(GLOBALS_READ),
        SET(LOCAL_LINKAGES), 2, SET(KNOWN_LINKAGES), PRIMITIVE, PRIMITIVE_NAMES, N(PRIMITIVE),
        SET(SIMPLE_CONSTANTS), SET(MD_DEBUG), SET(MD_KNOWN), 100, (const uint8_t *)"llvm.", 5, ASM_CODES, ASM_AT,
        N(ASM_CODES), SET(MD_NO_ID), (const uint8_t *)"llvm.module.flags", 17, SET(GLOBAL_VALUE_CODES)};
    bc_key keys[3] = {0};
    keys[0].bid = 11;
    keys[0].has_only = 1;
    keys[0].only = SET(FACTS_CONSTANTS);
    keys[1].bid = 12;
    keys[1].has_only = 1;
    keys[1].only = (bc_set){NULL, 0};
    keys[1].has_first = 1;
    keys[1].first = 2;
    keys[2].bid = 20;
    keys[2].has_first = 1;
    keys[2].first = 0;
    bc_key debug = {0};
    debug.bid = 15;
    debug.has_unread = 1;
    debug.unread = SET(MD_DEBUG);
    bc_key facts_keys[4] = {keys[0], keys[1], keys[2], debug};
    bc_want facts = {1, {NULL, 0}, SET(FACTS_SKIP), facts_keys, 4, 1};
    bc_want whole = {1, {NULL, 0}, SET(WHOLE_SKIP), NULL, 0, 1};
    bc_facts_out out = {0};
    char error[96];
    int e = bc_module_facts(data, size, how & 1 ? own : &facts, how & 2 ? own : &whole, &tables, &out, error,
                            sizeof error);
    if (e == BC_OK) {
        const char first[] = "interface shardkey 4";
        if (out.interface.failed || out.bytes.failed || out.interface.n < sizeof first ||
            memcmp(out.interface.p, first, sizeof first - 1) || out.interface.p[out.interface.n - 1] != '\n')
            abort();
        for (size_t i = 0; i < out.interface.n; i++)
            if (out.interface.p[i] & 0x80)
                abort();
        for (size_t i = 0; i < out.n; i++)
            if (out.facts[i].at > out.bytes.n || out.facts[i].n > out.bytes.n - out.facts[i].at)
                abort();
    } else if ((e == BC_BAD && !error[0]) || (e != BC_BAD && e != BC_DEFER && e != BC_NOMEM)) {
        abort();
    }
    bc_facts_out_free(&out);
}

/* bitcode._STRTAB_WANT's blocks, sorted. */
static const uint64_t STRTAB_ENTER[] = {8, 19};

/* The stream's MODULE_STRTAB as bitcode.Strtab reads it, then the stream with the block written again,
   each entry naming bytes of a length the input chooses (lengths of one and two VBR6 chunks): a
   refusal says why; the relocated stream is the input with whole words in the block's place, the
   bytes after the block as they were. */
static void strtab(const uint8_t *data, size_t size, uint8_t how) {
    static uint8_t text[1100];
    for (size_t k = 0; k < sizeof text; k++)
        text[k] = (uint8_t)(k * 41 + 7); /* bytes that are not UTF-8 among them */
    bc_want want = {0, SET(STRTAB_ENTER), {NULL, 0}, NULL, 0, 1};
    bc_u64s events = {0};
    bc_strtab st;
    char error[96];
    int e = bc_strtab_read(data, size, &want, &events, &st, error, sizeof error);
    if (e == BC_OK) {
        bc_name *names = malloc((st.entries ? st.entries : 1) * sizeof *names);
        if (!names)
            abort();
        for (size_t k = 0; k < st.entries; k++) {
            names[k].p = text;
            names[k].n = (k * 37 + how) % (how & 1 ? sizeof text : 40);
        }
        bc_text out = {0};
        e = bc_strtab_relocate(data, size, events.v, &st, names, &out, error, sizeof error);
        if (e == BC_OK) {
            size_t tail = size - (size_t)(events.v[st.b + 5] / 8);
            if (out.failed || ((out.n - size) & 3) || out.n < tail ||
                memcmp(out.p + out.n - tail, data + size - tail, tail))
                abort();
        } else if ((e == BC_BAD && !error[0]) || (e != BC_BAD && e != BC_DEFER && e != BC_NOMEM)) {
            abort();
        }
        bc_text_free(&out);
        free(names);
    } else if (e == BC_BAD && !error[0]) {
        abort();
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
    module_facts(data + 4, size - 4, &want, (how >> 5) & 1 ? (how >> 6) & 3 : 0);
    strtab(data + 4, size - 4, how ^ key_bits);
    return 0;
}
