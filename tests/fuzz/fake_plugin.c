/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fuzz/fake_plugin.c — a dmm plugin whose every answer is chosen by the fuzz input, for
 * fuzz_plugin.c (built as a MODULE; it links no dmm symbol, only the public types of dmm/plugin.h).
 *
 * The idea: the host must treat a plugin as untrusted data behind function pointers (src/plugin/).
 * So each answer here is drawn from the input: status codes (OK, unset, a dmm_status, no dmm_status,
 * an unterminated message), struct sizes and minors, NULL or hostile names, kinds lists of any
 * length, tables with slots missing, allocations with zero or odd addresses and ids, outcomes with
 * unknown states, answers left unset. Byte value 0 always picks the well-behaved answer, so an input
 * that runs out, or fake_plugin_behave(), makes the plugin good for the harness's teardown.
 *
 * What the plugin itself checks (a FUZZ_ASSERT here is a host bug): every struct it hands over lies
 * in a buffer of exactly its announced size (the sanitizer sees a host read past it); the host passes
 * back the impl it was given, lends structs of its full size, passes 2n valid range words, and never
 * calls a 1.1 slot when the agreed minor is 0 or a slot after a successful destroy (the impl is then
 * marked dead). Everything it makes, impls included, lives until the next input: a host that drops
 * an object the plugin made is not a leak of the host's.
 */
#include <stdarg.h>

#include "dmm/plugin.h"
#include "fake_plugin.h"
#include "fuzzkit.h"

/* ---- the input, and what this input made (freed at the next feed) ---- */
static uint8_t *script;
static fuzz_in in;
static int behaving;
static void *made[1024];
static size_t nmade;
static uint64_t next_id, next_va;

static uint8_t pick(void) { return behaving ? 0 : fuzz_u8(&in); }
static uint64_t pick_bits(int bytes) { return behaving ? 0 : fuzz_bits(&in, bytes); }

/* A buffer of exactly n bytes owned until the next input. */
static void *keep(size_t n) {
    FUZZ_ASSERT(nmade < sizeof made / sizeof made[0], "the fake plugin made too much for one input");
    void *p = calloc(1, n ? n : 1);
    FUZZ_ASSERT(p != NULL, "out of memory");
    made[nmade++] = p;
    return p;
}

DMM_PLUGIN_EXPORT fake_plugin_feed_fn fake_plugin_feed;
void fake_plugin_feed(const uint8_t *data, size_t n) {
    for (size_t i = 0; i < nmade; i++) free(made[i]);
    nmade = 0;
    free(script);
    script = malloc(n ? n : 1);
    FUZZ_ASSERT(script != NULL, "out of memory");
    if (n) memcpy(script, data, n);
    in = fuzz_in_of(script, n);
    behaving = 0;
    next_id = 1;
    next_va = 0x7f0000000000ull;
}

DMM_PLUGIN_EXPORT fake_plugin_byte_fn fake_plugin_byte;
uint8_t fake_plugin_byte(void) { return fuzz_u8(&in); }

DMM_PLUGIN_EXPORT fake_plugin_behave_fn fake_plugin_behave;
void fake_plugin_behave(void) { behaving = 1; }

/* ---- answers ---- */

static void answer(dmm_plugin_status *st) {
    FUZZ_ASSERT(st != NULL && st->struct_size == sizeof *st && st->code == DMM_PLUGIN_STATUS_UNSET,
                "the host lent a status of %u bytes, code %d", st ? st->struct_size : 0, st ? st->code : 0);
    uint8_t how = pick();
    switch (how % 5) {
    case 0: st->code = DMM_OK; return;
    case 1: return; /* forgets it */
    case 2: st->code = (int32_t)(1 + pick() % (DMM_STATUS_COUNT - 1)); break;
    case 3: st->code = (int32_t)pick_bits(4); break;
    default: st->code = DMM_ERR_BUSY; break;
    }
    if (how & 8) { /* an unterminated message of every byte */
        for (size_t i = 0; i < sizeof st->message; i++) st->message[i] = (char)(pick() | 1);
    } else {
        snprintf(st->message, sizeof st->message, "fake plugin refuses (%u)", how);
    }
}

/* A NUL-terminated string in a buffer of exactly its size: "fuzz", NULL, or of a chosen length. */
static const char *a_string(const char *good) {
    uint8_t how = pick();
    if (how % 3 == 0) return good;
    if (how % 3 == 1) return NULL;
    size_t n = pick();
    char *s = keep(n + 1);
    for (size_t i = 0; i < n; i++) s[i] = (char)('a' + pick() % 26);
    return s;
}

/* A struct of `size` bytes handed to the host: the first min(announced, size) bytes of `full`, then
 * chosen bytes up to `announced` (a bigger struct of a later minor); the buffer is exactly the
 * announced size (at least the 4 bytes of struct_size itself). */
static const void *hand_over(const void *full, size_t size, uint32_t announced) {
    size_t n = announced < 4 ? 4 : announced;
    uint8_t *p = keep(n);
    memcpy(p, full, n < size ? n : size);
    for (size_t i = size; i < n; i++) p[i] = pick();
    memcpy(p, &announced, sizeof announced);
    return p;
}

static uint32_t a_size(size_t good) {
    uint8_t how = pick();
    uint32_t n;
    switch (how % 4) {
    case 0: return (uint32_t)good;
    case 1: n = pick() % (good + 1); break;
    case 2: n = (uint32_t)good + pick() % 64; break;
    default: n = (uint32_t)pick_bits(2) % 4096; break;
    }
    return n;
}

static uint32_t a_minor(void) {
    uint8_t how = pick();
    return how % 4 == 0 ? DMM_PLUGIN_ABI_MINOR : how % 4 == 1 ? 0 : how % 4 == 2 ? DMM_PLUGIN_ABI_MINOR + 1 : (uint32_t)pick_bits(4);
}

/* ---- the mechanism ---- */

typedef struct fake {
    uint32_t magic;
    uint32_t minor; /* agreed, from the create args */
} fake;
#define FAKE_MAGIC 0xFA4EF00Du

static fake *me(void *impl) {
    fake *f = impl;
    FUZZ_ASSERT(f != NULL && f->magic == FAKE_MAGIC, "the host passed impl %p, not the fake's", impl);
    return f;
}

static void fill_allocation(dmm_plugin_allocation *out, uint64_t bytes, uint64_t align) {
    FUZZ_ASSERT(out->struct_size == sizeof *out && out->ptr == 0 && out->id == 0, "the host lent a dirty allocation");
    uint64_t a = align > 4096 && (align & (align - 1)) == 0 ? align : 4096;
    switch (pick() % 6) {
    case 0:
        next_va = (next_va + a - 1) & ~(a - 1);
        out->ptr = next_va;
        out->bytes = bytes;
        out->align = align;
        out->id = next_id++;
        next_va += bytes < ((uint64_t)1 << 40) ? bytes + 4096 : 4096;
        break;
    case 1: break; /* left as lent */
    case 2: out->ptr = 0, out->id = next_id++; break;
    case 3: out->ptr = next_va, out->id = 0; break;
    default:
        out->ptr = pick_bits(8);
        out->bytes = pick_bits(8);
        out->align = pick_bits(8);
        out->id = pick_bits(8);
        break;
    }
}

static void fill_outcome(dmm_plugin_release_outcome *o, uint64_t bytes) {
    FUZZ_ASSERT(o->struct_size == sizeof *o && o->state == DMM_PLUGIN_STATE_UNSET, "the host lent a dirty outcome");
    switch (pick() % 6) {
    case 0: o->state = DMM_RELEASE_COMPLETE, o->allocation_bytes = bytes, o->unmapped_bytes = bytes; break;
    case 1: break; /* unfilled */
    case 2: o->state = DMM_RELEASE_FAILED, o->failure = DMM_ERR_DRIVER; break;
    case 3: o->state = DMM_RELEASE_QUARANTINED, o->failure = (int32_t)pick_bits(4); break;
    case 4: o->state = DMM_RELEASE_COMPLETE, o->failure = (int32_t)pick_bits(4); break;
    default:
        o->state = (uint32_t)pick_bits(4);
        o->allocation_bytes = pick_bits(8);
        o->unmapped_bytes = pick_bits(8);
        o->residual_owned_bytes = pick_bits(8);
        o->failure = (int32_t)pick_bits(4);
        break;
    }
}

/* The host passes 2n readable words (the sanitizer checks the reads). */
static uint64_t read_ranges(const uint64_t *ranges, uint64_t n) {
    FUZZ_ASSERT(n == 0 || ranges != NULL, "%llu ranges at NULL", (unsigned long long)n);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < 2 * n; i++) sum += ranges[i];
    return sum;
}

static void f_allocate(void *impl, uint64_t bytes, uint64_t align, dmm_plugin_allocation *out, dmm_plugin_status *st) {
    me(impl);
    fill_allocation(out, bytes, align);
    answer(st);
}

static void f_release(void *impl, const dmm_plugin_allocation *a, dmm_plugin_release_outcome *out,
                      dmm_plugin_status *st) {
    me(impl);
    fill_outcome(out, a->bytes);
    answer(st);
}

static void f_device(void *impl, int32_t *tier, int32_t *index, dmm_plugin_status *st) {
    me(impl);
    if (pick() % 3 == 0) {
        *tier = DMM_TIER_DEVICE;
        *index = 0;
    } else {
        *tier = (int32_t)(pick() % 5) - 1;
        *index = (int32_t)pick_bits(4);
    }
    answer(st);
}

static void f_destroy(void *impl, dmm_plugin_status *st) {
    fake *f = me(impl);
    answer(st);
    if (st->code == DMM_OK) f->magic = 0; /* dead: a later call with this impl is a host bug */
}

static void f_stats(void *impl, dmm_stats *out, dmm_plugin_status *st) {
    me(impl);
    FUZZ_ASSERT(out->size == sizeof *out, "the host lent a dmm_stats of %u bytes", out->size);
    if (pick() % 2) {
        uint8_t *p = (uint8_t *)out + sizeof out->size;
        for (size_t i = sizeof out->size; i < sizeof *out; i++) *p++ = pick();
    }
    if (pick() % 4 == 3) out->size = (uint32_t)pick_bits(4); /* must be left alone: the host ignores it */
    answer(st);
}

static void f_allocate_committed(void *impl, uint64_t bytes, uint64_t align, const uint64_t *ranges, uint64_t n,
                                 dmm_plugin_allocation *out, dmm_plugin_status *st) {
    me(impl);
    (void)read_ranges(ranges, n);
    fill_allocation(out, bytes, align);
    answer(st);
}

static void f_commit(void *impl, const dmm_plugin_allocation *a, uint64_t offset, uint64_t bytes,
                     uint64_t *newly_mapped, dmm_plugin_status *st) {
    me(impl);
    (void)a, (void)offset;
    *newly_mapped = pick() % 2 ? bytes : pick_bits(8);
    answer(st);
}

static void f_decommit(void *impl, const dmm_plugin_allocation *a, uint64_t offset, uint64_t bytes,
                       dmm_plugin_release_outcome *out, dmm_plugin_status *st) {
    me(impl);
    (void)a, (void)offset;
    fill_outcome(out, bytes);
    answer(st);
}

static void f_committed_bytes(void *impl, const dmm_plugin_allocation *a, uint64_t *bytes, dmm_plugin_status *st) {
    me(impl);
    *bytes = pick() % 2 ? a->bytes : pick_bits(8);
    answer(st);
}

static void f_mapped_bytes_for_ranges(void *impl, const dmm_plugin_allocation *a, const uint64_t *ranges, uint64_t n,
                                      uint64_t *bytes, dmm_plugin_status *st) {
    me(impl);
    (void)a;
    uint64_t sum = read_ranges(ranges, n);
    *bytes = pick() % 2 ? sum : pick_bits(8);
    answer(st);
}

/* The 1.1 slots: never called when the agreed minor is 0. */
static void at_minor1(void *impl, const char *slot) {
    FUZZ_ASSERT(me(impl)->minor >= 1, "the host called the 1.1 slot %s at agreed minor 0", slot);
}

static void f_alias(void *impl, const dmm_plugin_allocation *a, uint64_t dst, uint64_t src, uint64_t bytes,
                    dmm_plugin_status *st) {
    at_minor1(impl, "alias");
    (void)a, (void)dst, (void)src, (void)bytes;
    answer(st);
}

static void f_is_quarantined(void *impl, uint64_t ptr, uint64_t bytes, uint32_t *q, dmm_plugin_status *st) {
    at_minor1(impl, "is_quarantined");
    (void)ptr, (void)bytes;
    FUZZ_ASSERT(*q == DMM_PLUGIN_ANSWER_UNSET, "the host pre-filled %u", *q);
    uint8_t how = pick() % 4;
    if (how < 2) *q = how;
    else if (how == 3) *q = (uint32_t)pick_bits(4);
    answer(st);
}

static void f_drain_cache(void *impl, dmm_plugin_status *st) {
    at_minor1(impl, "drain_cache");
    answer(st);
}

static void f_reservation(void *impl, uint64_t *va, uint64_t *bytes, dmm_plugin_status *st) {
    at_minor1(impl, "reservation");
    *va = pick() % 2 ? 0x7e0000000000ull : pick_bits(8);
    *bytes = pick() % 2 ? (uint64_t)1 << 30 : pick_bits(8);
    answer(st);
}

/* Slot k of a table is present unless bit k of `missing` says otherwise. */
#define SLOT(k, fn) ((missing >> (k)) & 1 ? NULL : (fn))

static const dmm_plugin_virtual_backing_ops *a_vb_table(void) {
    uint16_t missing = pick() % 2 ? 0 : (uint16_t)pick_bits(2);
    dmm_plugin_virtual_backing_ops vb = {
        sizeof vb,
        a_minor(),
        SLOT(0, f_allocate_committed),
        SLOT(1, f_commit),
        SLOT(2, f_decommit),
        SLOT(3, f_committed_bytes),
        SLOT(4, f_mapped_bytes_for_ranges),
        SLOT(5, f_alias),
        SLOT(6, f_is_quarantined),
        SLOT(7, f_drain_cache),
        SLOT(8, f_reservation),
    };
    return hand_over(&vb, sizeof vb, a_size(sizeof vb));
}

static const dmm_plugin_mechanism_ops *an_ops_table(void) {
    uint8_t how = pick();
    if (how % 4 == 1) return NULL;
    uint8_t missing = how % 4 == 2 ? pick() : 0;
    dmm_plugin_mechanism_ops ops = {
        sizeof ops, a_minor(), a_string("fake"), SLOT(0, f_allocate), SLOT(1, f_release), SLOT(2, f_device),
        SLOT(3, f_destroy), SLOT(4, f_stats), NULL,
    };
    if (!((missing >> 5) & 1) && (ops.name == NULL || pick() % 4 != 3)) ops.virtual_backing = a_vb_table();
    return hand_over(&ops, sizeof ops, a_size(sizeof ops));
}

/* ---- the exports ---- */

static const char *const *a_kinds(void) {
    uint8_t how = pick();
    if (how % 3 == 0) {
        const char **k = keep(2 * sizeof *k);
        k[0] = "fuzz";
        return k;
    }
    if (how % 3 == 1) return NULL;
    size_t n = pick() % 40;
    const char **k = keep((n + 1) * sizeof *k); /* exactly n entries and the NULL */
    for (size_t i = 0; i < n; i++) {
        k[i] = a_string("fuzz");
        if (k[i] == NULL) k[i] = "fake"; /* a NULL would end the list early */
    }
    return k;
}

DMM_PLUGIN_EXPORT void dmm_plugin_negotiate(const dmm_plugin_host *host, const dmm_plugin_info **info,
                                            dmm_plugin_status *st) {
    FUZZ_ASSERT(host->struct_size == sizeof *host && host->abi_major == DMM_PLUGIN_ABI_MAJOR, "a strange host");
    FUZZ_ASSERT(*info == NULL, "the host's info pointer is not NULL before negotiation");
    uint8_t how = pick();
    if (how % 4 != 1) {
        dmm_plugin_info i = {
            sizeof i, a_minor(), pick() % 4 ? DMM_PLUGIN_ABI_MAJOR : (uint32_t)pick_bits(4),
            pick() % 2 ? DMM_CAP_VIRTUAL_BACKING : (uint32_t)pick_bits(4), a_string("fuzz"), a_string("1.0"),
            a_kinds(),
        };
        *info = hand_over(&i, sizeof i, a_size(sizeof i));
    }
    answer(st);
}

DMM_PLUGIN_EXPORT void dmm_plugin_create(const dmm_plugin_create_args *args, void **impl,
                                         const dmm_plugin_mechanism_ops **ops, dmm_plugin_status *st) {
    FUZZ_ASSERT(args->struct_size == sizeof *args && args->kind != NULL && args->driver != NULL &&
                    args->abi_minor <= DMM_PLUGIN_ABI_MINOR,
                "strange create args (size %u, minor %u)", args->struct_size, args->abi_minor);
    FUZZ_ASSERT(*impl == NULL && *ops == NULL, "the host's outputs are not NULL before create");
    if (pick() % 4 != 1) {
        fake *f = keep(sizeof *f);
        f->magic = FAKE_MAGIC;
        f->minor = args->abi_minor;
        *impl = f;
    }
    *ops = an_ops_table();
    answer(st);
    if (st->code != DMM_OK && *impl != NULL) ((fake *)*impl)->magic = 0; /* a failed factory cleans up */
}

DMM_PLUGIN_EXPORT void dmm_plugin_can_unload(dmm_plugin_status *st) { answer(st); }
