/*
 * The floor of qemu-uftrace's design, in layers: a throwaway QEMU plugin (aarch64, or x86_64
 * with `isa=x86`; one vCPU)
 * that does what the real plugin does to the generated code, with callbacks that do nothing
 * or nearly nothing. bench/floor.sh runs each layer against plain QEMU and the real plugin,
 * so that what our own code costs can be told from what any plugin of this design costs.
 *
 *   level=1  a translation callback that instruments nothing (QEMU's tax on any plugin)
 *   level=2  + the instruction counter: an inline add at every block start (--clock insn)
 *   level=3  + the instrumentation: a callback on every BL/BLR, an inline flag store on
 *              every RET, a callback conditional on that flag at blocks that start just
 *              after a call; the callbacks only clear the flag
 *   level=4  + minimal bodies: a shadow stack and 16-byte records into a ring, no writer,
 *              no checks beyond a bound (the least a correct tracer could do)
 *
 * Plugin API v4 (QEMU 9.2+); the few declarations needed are spelled out here because
 * Debian ships no qemu-plugin.h. Not a tracer: its records are never read.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
struct qemu_plugin_scoreboard;
typedef struct {
    struct qemu_plugin_scoreboard *score;
    size_t offset;
} qemu_plugin_u64;
typedef void (*tb_trans_cb)(qemu_plugin_id_t, struct qemu_plugin_tb *);
typedef void (*udata_cb)(unsigned int, void *);
enum { CB_NO_REGS = 0, CB_R_REGS = 1 };
enum { INLINE_ADD_U64 = 0, INLINE_STORE_U64 = 1 };
enum { COND_EQ = 2 };

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t, tb_trans_cb);
struct qemu_plugin_scoreboard *qemu_plugin_scoreboard_new(size_t);
void *qemu_plugin_scoreboard_find(struct qemu_plugin_scoreboard *, unsigned int);
void qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(struct qemu_plugin_tb *, int,
                                                       qemu_plugin_u64, uint64_t);
void qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(struct qemu_plugin_insn *, int,
                                                         qemu_plugin_u64, uint64_t);
void qemu_plugin_register_vcpu_tb_exec_cond_cb(struct qemu_plugin_tb *, udata_cb, int, int,
                                               qemu_plugin_u64, uint64_t, void *);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *, udata_cb, int, void *);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *, size_t);
size_t qemu_plugin_insn_data(const struct qemu_plugin_insn *, void *, size_t);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *);
void *qemu_plugin_insn_haddr(const struct qemu_plugin_insn *);

__attribute__((visibility("default"))) int qemu_plugin_version = 4;

static int level = 4;
static int x86; /* isa=x86: 64-bit x86 code (CALL rel32, CALL r/m, RET) */
static struct qemu_plugin_scoreboard *board;
static qemu_plugin_u64 counter, pending;
/* vCPU 0's counter and flag, found at the first callback (all vCPUs exist by then). */
static volatile uint64_t *counter_word, *pending_word;

#define STACK_MAX (1u << 16)
#define RING_BYTES (64u << 20)
static uint64_t stack[STACK_MAX][2]; /* function, return address */
static unsigned depth;
static uint64_t *ring, *ring_at, *ring_end;

static int is_bl(uint32_t w) { return (w & 0xFC000000u) == 0x94000000u; }
static int is_blr(uint32_t w) { return (w & 0xFFFFFC1Fu) == 0xD63F0000u; }
static int is_ret(uint32_t w) { return (w & 0xFFFFFC1Fu) == 0xD65F0000u; }

/* x86_64: the length of the legacy and REX prefixes at `b`. */
static size_t x86_prefixes(const uint8_t *b, size_t n)
{
    size_t i = 0;
    while (i < n && (b[i] == 0x66 || b[i] == 0x67 || b[i] == 0xf0 || b[i] == 0xf2 || b[i] == 0xf3 ||
                     b[i] == 0x26 || b[i] == 0x2e || b[i] == 0x36 || b[i] == 0x3e ||
                     b[i] == 0x64 || b[i] == 0x65 || (b[i] & 0xf0) == 0x40)) {
        i++;
    }
    return i;
}

/* x86_64: 1 for a direct call, 2 for a call through a register or memory, 3 for a return. */
static int x86_kind(const uint8_t *b, size_t n)
{
    size_t i = x86_prefixes(b, n);
    if (i >= n) {
        return 0;
    }
    if (b[i] == 0xe8) {
        return 1;
    }
    if (b[i] == 0xff && i + 1 < n && ((b[i + 1] >> 3) & 7) == 2) {
        return 2;
    }
    return b[i] == 0xc3 || b[i] == 0xc2 ? 3 : 0;
}

/* x86_64: whether the bytes before `host` end a call (the common forms only). */
static int x86_after_call(const uint8_t *host)
{
    if (host[-5] == 0xe8) {
        return 1;
    }
    static const int lens[] = {2, 3, 6, 7};
    for (size_t k = 0; k < 4; k++) {
        const uint8_t *at = host - lens[k];
        if (at[0] == 0xff && ((at[1] >> 3) & 7) == 2) {
            return 1;
        }
    }
    return 0;
}

static void find_words(void)
{
    if (__builtin_expect(!pending_word, 0)) {
        char *element = qemu_plugin_scoreboard_find(board, 0);
        counter_word = (uint64_t *)element;
        pending_word = (uint64_t *)(element + 8);
    }
}

static inline void emit(uint64_t time, uint64_t word)
{
    if (__builtin_expect(ring_at == ring_end, 0)) {
        ring_at = ring;
    }
    __builtin_prefetch((char *)ring_at + 4096, 1);
    ring_at[0] = time;
    ring_at[1] = word;
    ring_at += 2;
}

/* `data`: the call's own address; the callee is named by it, the return lands after it (x86:
 * `data` is the return address itself). */
static void on_call(unsigned int vcpu, void *data)
{
    if (level < 4) {
        return;
    }
    find_words();
    uint64_t pc = (uintptr_t)data;
    if (*pending_word) { /* a return whose landing no block saw */
        *pending_word = 0;
        if (depth) {
            depth--;
        }
    }
    if (depth < STACK_MAX) {
        stack[depth][0] = pc;
        stack[depth][1] = x86 ? pc : pc + 4;
        emit(*counter_word, pc | (uint64_t)depth << 48);
        depth++;
    }
}

/* `data`: the landing block's address, where the return went. */
static void on_landing(unsigned int vcpu, void *data)
{
    find_words();
    *pending_word = 0;
    if (level < 4) {
        return;
    }
    if (depth && stack[depth - 1][1] == (uintptr_t)data) {
        depth--;
        emit(*counter_word, stack[depth][0] | (uint64_t)depth << 48 | 1ull << 63);
    }
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    if (level < 2 || n == 0) {
        return;
    }
    struct qemu_plugin_insn *first = qemu_plugin_tb_get_insn(tb, 0);
    uint64_t start = qemu_plugin_insn_vaddr(first);
    const uint8_t *host = qemu_plugin_insn_haddr(first);
    if (level >= 3 && host && start % 1024 >= 8) {
        uint32_t before;
        memcpy(&before, host - 4, 4);
        if (x86 ? x86_after_call(host) : is_bl(before) || is_blr(before)) {
            qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, on_landing, CB_R_REGS, COND_EQ,
                                                      pending, 1, (void *)(uintptr_t)start);
        }
    }
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, INLINE_ADD_U64, counter, n);
    if (level < 3) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint32_t w = 0;
        qemu_plugin_insn_data(insn, &w, 4);
        void *pc = (void *)(uintptr_t)qemu_plugin_insn_vaddr(insn);
        if (x86) {
            uint8_t b[16];
            size_t len = qemu_plugin_insn_data(insn, b, sizeof(b));
            void *ret = (char *)pc + len;
            switch (x86_kind(b, len)) {
            case 1:
                qemu_plugin_register_vcpu_insn_exec_cb(insn, on_call, CB_NO_REGS, ret);
                break;
            case 2:
                qemu_plugin_register_vcpu_insn_exec_cb(insn, on_call, CB_R_REGS, ret);
                break;
            case 3:
                qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn, INLINE_STORE_U64,
                                                                    pending, 1);
                break;
            }
        } else if (is_bl(w)) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, on_call, CB_NO_REGS, pc);
        } else if (is_blr(w)) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, on_call, CB_R_REGS, pc);
        } else if (is_ret(w)) {
            qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn, INLINE_STORE_U64,
                                                                pending, 1);
        }
    }
}

__attribute__((visibility("default"))) int
qemu_plugin_install(qemu_plugin_id_t id, const void *info, int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "level=", 6)) {
            level = atoi(argv[i] + 6);
        } else if (!strcmp(argv[i], "isa=x86")) {
            x86 = 1;
        }
    }
    board = qemu_plugin_scoreboard_new(16);
    counter = (qemu_plugin_u64){board, 0};
    pending = (qemu_plugin_u64){board, 8};
    ring = calloc(1, RING_BYTES);
    if (!ring) {
        return -1;
    }
    ring_at = ring;
    ring_end = ring + RING_BYTES / sizeof(uint64_t);
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    return 0;
}
