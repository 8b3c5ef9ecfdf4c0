/* src/plugin/plugin_mechanism.c — a plugin's mechanism wrapped as a normal dmm_mechanism, so that
 * pools, providers and the governor use it unchanged (DESIGN §4.4, §4.12).
 *
 * What it owns: the host-side record of one plugin mechanism (`pmech`): a host dmm_mechanism_ops
 * built from the plugin's table, zeroed local copies of the plugin's tables, the device (asked once)
 * and a count of the allocations it handed out.
 *
 * Idea: translate, never trust. Each slot call lends the plugin plain-data structs pre-filled to read
 * as failure (status UNSET, outcome state UNSET = QUARANTINED), so a plugin that forgets to fill
 * them fails loudly instead of succeeding silently. The host table has a capability table only where
 * the plugin's table has one (so dmm_mechanism_capabilities reports exactly the slots present and
 * the generic wrapper answers DMM_ERR_UNSUPPORTED for the rest); optional slots left NULL stay NULL —
 * also the optional virtual-backing slots of 1.1 (alias, is_quarantined, drain_cache, reservation),
 * so dmm_mechanism_has_slot tells a pool on top exactly what the plugin offers. Tables are read by
 * the copy rule up to what the agreed minor defines: a slot of a later minor is never copied, so it
 * is never called (a plugin of minor 0 never has its 1.1 slots called, whatever its table holds).
 *
 * Trade-off: the host keeps its own count of live allocations (one atomic per allocate/release) so
 * that a destroy is refused while anything is live even if the plugin's own destroy would not refuse
 * it; a plugin that lies about which allocations exist can still fool its own records, not the count.
 *
 * Invariants: pm->live = allocations handed out − releases not FAILED;
 *   dmm_mechanism_destroy succeeds ⇒ pm->live = 0, the plugin's destroy said DMM_OK, and the plugin's
 *   `mechanisms` count was decremented exactly once.
 */
#include <stdlib.h>
#include <string.h>

#include "plugin/plugin_internal.h"

typedef struct pmech {
    dmm_mechanism_ops ops;              /* the host's table over this record */
    dmm_virtual_backing_ops vb;         /* used only when the plugin has virtual backing */
    dmm_plugin *plugin;                 /* not owned; outlives us (its unload is refused meanwhile) */
    void *impl;                         /* the plugin's object */
    dmm_plugin_mechanism_ops pops;      /* zeroed local copy of the plugin's table */
    dmm_plugin_virtual_backing_ops pvb; /* zeroed local copy, when present */
    dmm_device device;                  /* asked once, at creation */
    _Atomic uint64_t live;              /* allocations handed out and not released */
    char name[DMM__PLUGIN_NAME_BYTES];  /* bounded copy of the plugin table's name */
} pmech;

/* Sizes the agreed minor defines: what is copied at most (a slot above it is never read). 1.1
 * appended the optional virtual-backing slots; the mechanism table did not grow. */
static size_t ops_size_for_minor(uint32_t minor) {
    (void)minor;
    return DMM_PLUGIN_MECHANISM_OPS_SIZE_1_0;
}
static size_t vb_size_for_minor(uint32_t minor) {
    return minor >= 1 ? DMM_PLUGIN_VIRTUAL_BACKING_SIZE_1_1 : DMM_PLUGIN_VIRTUAL_BACKING_SIZE_1_0;
}
/* The smallest virtual-backing table accepted in every minor: the 1.0 slots (required); a shorter
 * 1.1 table only lacks the optional slots. */
#define VB_SIZE_REQUIRED DMM_PLUGIN_VIRTUAL_BACKING_SIZE_1_0

static dmm_plugin_allocation to_plugin(const dmm_allocation *a) {
    dmm_plugin_allocation pa;
    memset(&pa, 0, sizeof pa);
    pa.struct_size = (uint32_t)sizeof pa;
    pa.ptr = (uint64_t)(uintptr_t)a->ptr;
    pa.bytes = a->bytes;
    pa.align = a->align;
    pa.id = a->id;
    return pa;
}

static void outcome_init(dmm_plugin_release_outcome *po) {
    memset(po, 0, sizeof *po);
    po->struct_size = (uint32_t)sizeof *po;
    po->state = DMM_PLUGIN_STATE_UNSET;
}

/* The plugin's outcome as a dmm_release_outcome: unknown (or unset) states become QUARANTINED, a
 * failed status turns COMPLETE into QUARANTINED (something failed: the memory may not be gone), and
 * every non-COMPLETE outcome carries a failure code and a sentence. */
static dmm_release_outcome read_outcome(const pmech *pm, const dmm_plugin_release_outcome *po,
                                        const dmm_plugin_status *st, const char *what, const dmm_allocation *a) {
    dmm_release_outcome o = {po->state, po->allocation_bytes, po->unmapped_bytes, po->residual_owned_bytes,
                             (dmm_status)po->failure};
    dmm_release_state state = dmm_release_state_of(&o);
    o.state = state;
    if (po->failure < 0 || po->failure >= DMM_STATUS_COUNT) o.failure = DMM_ERR_DRIVER;
    if (st->code != DMM_OK) {
        dmm_status s = dmm__plugin_check(pm->plugin, st, "%s of %zu bytes at %p (id %llu) by mechanism '%s'", what,
                                         a->bytes, a->ptr, (unsigned long long)a->id, pm->name);
        if (state == DMM_RELEASE_COMPLETE) o.state = DMM_RELEASE_QUARANTINED;
        if (o.failure == DMM_OK) o.failure = s;
    } else if (state != DMM_RELEASE_COMPLETE) {
        if (o.failure == DMM_OK) o.failure = DMM_ERR_DRIVER;
        dmm_error_set(o.failure,
                      "%s of %zu bytes at %p (id %llu) by mechanism '%s': plugin '%s' (%s) reported %s%s without a "
                      "failing status",
                      what, a->bytes, a->ptr, (unsigned long long)a->id, pm->name, pm->plugin->name,
                      pm->plugin->path, dmm_release_state_str(o.state),
                      po->state == DMM_PLUGIN_STATE_UNSET ? " (it left the outcome unfilled)" : "");
    }
    return o;
}

/* A successful allocate-shaped call must hand back an address and an id. */
static dmm_status take_allocation(pmech *pm, const dmm_plugin_allocation *pa, size_t bytes, size_t align,
                                  dmm_allocation *out, const char *what) {
    if (pa->ptr == 0 || pa->id == 0 || (uint64_t)(uintptr_t)pa->ptr != pa->ptr)
        return dmm_error_set(DMM_ERR_DRIVER,
                             "%s of %zu bytes by mechanism '%s': plugin '%s' (%s) reported success but handed back "
                             "ptr 0x%llx, id %llu (an allocation needs a non-zero address and id)",
                             what, bytes, pm->name, pm->plugin->name, pm->plugin->path,
                             (unsigned long long)pa->ptr, (unsigned long long)pa->id);
    out->ptr = (void *)(uintptr_t)pa->ptr;
    out->bytes = bytes;
    out->align = pa->align != 0 ? (size_t)pa->align : align;
    out->id = pa->id;
    dmm_atomic_add_relaxed(&pm->live, 1);
    return DMM_OK;
}

/* ---- the required slots ---- */

static dmm_status pm_allocate(void *impl, size_t bytes, size_t align, dmm_allocation *out) {
    pmech *pm = impl;
    dmm_plugin_allocation pa;
    memset(&pa, 0, sizeof pa);
    pa.struct_size = (uint32_t)sizeof pa;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pops.allocate(pm->impl, bytes, align, &pa, &st);
    dmm_status s = dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_allocate of %zu bytes (align %zu) by mechanism '%s'",
                                     bytes, align, pm->name);
    if (s != DMM_OK) return s;
    return take_allocation(pm, &pa, bytes, align, out, "dmm_mechanism_allocate");
}

static dmm_release_outcome pm_release(void *impl, const dmm_allocation *a) {
    pmech *pm = impl;
    dmm_plugin_allocation pa = to_plugin(a);
    dmm_plugin_release_outcome po;
    outcome_init(&po);
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pops.release(pm->impl, &pa, &po, &st);
    dmm_release_outcome o = read_outcome(pm, &po, &st, "dmm_mechanism_release", a);
    if (o.state != DMM_RELEASE_FAILED) atomic_fetch_sub_explicit(&pm->live, 1, memory_order_relaxed);
    return o;
}

static dmm_device pm_device(void *impl) { return ((pmech *)impl)->device; }

static dmm_status pm_stats(void *impl, dmm_stats *out) {
    pmech *pm = impl;
    dmm_stats local;
    memset(&local, 0, sizeof local);
    local.size = (uint32_t)sizeof local;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pops.stats(pm->impl, &local, &st);
    dmm_status s = dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_stats of mechanism '%s'", pm->name);
    if (s != DMM_OK) return s;
    local.size = (uint32_t)sizeof local; /* the plugin must not change it; the host's own size counts */
    return dmm__stats_copy_out(&local, out);
}

/* Destroys the plugin's object; on success forgets it and frees the record. */
static dmm_status pm_destroy(void *impl) {
    pmech *pm = impl;
    uint64_t live = dmm_atomic_load_acquire(&pm->live);
    if (live > 0)
        return dmm_error_set(DMM_ERR_BUSY,
                             "dmm_mechanism_destroy: mechanism '%s' of plugin '%s' (%s) still has %llu live "
                             "allocation%s; release them first; nothing was changed",
                             pm->name, pm->plugin->name, pm->plugin->path, (unsigned long long)live,
                             live == 1 ? "" : "s");
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pops.destroy(pm->impl, &st);
    dmm_status s = dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_destroy of mechanism '%s'", pm->name);
    if (s != DMM_OK) return s;
    dmm__plugin_lock();
    pm->plugin->mechanisms--;
    dmm__plugin_unlock();
    free(pm);
    return DMM_OK;
}

/* ---- virtual backing ---- */

/* n dmm_range → 2n uint64 (offset, bytes); `buf` holds 8 ranges, larger lists are allocated. */
static uint64_t *flatten(const dmm_range *ranges, size_t n, uint64_t *buf) {
    uint64_t *flat = n <= 8 ? buf : malloc(2 * n * sizeof *flat);
    if (flat == NULL) return NULL;
    for (size_t i = 0; i < n; i++) {
        flat[2 * i] = ranges[i].offset;
        flat[2 * i + 1] = ranges[i].bytes;
    }
    return flat;
}

static dmm_status pm_allocate_committed(void *impl, size_t bytes, size_t align, const dmm_range *ranges, size_t n,
                                        dmm_allocation *out) {
    pmech *pm = impl;
    uint64_t buf[16];
    uint64_t *flat = flatten(ranges, n, buf);
    if (flat == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                             "dmm_mechanism_allocate_committed: mechanism '%s': no host memory for %zu ranges", pm->name,
                             n);
    dmm_plugin_allocation pa;
    memset(&pa, 0, sizeof pa);
    pa.struct_size = (uint32_t)sizeof pa;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.allocate_committed(pm->impl, bytes, align, flat, n, &pa, &st);
    if (flat != buf) free(flat);
    dmm_status s = dmm__plugin_check(pm->plugin, &st,
                                     "dmm_mechanism_allocate_committed of %zu bytes (%zu ranges) by mechanism '%s'",
                                     bytes, n, pm->name);
    if (s != DMM_OK) return s;
    return take_allocation(pm, &pa, bytes, align, out, "dmm_mechanism_allocate_committed");
}

static dmm_status pm_commit(void *impl, const dmm_allocation *a, dmm_range range, uint64_t *newly_mapped) {
    pmech *pm = impl;
    dmm_plugin_allocation pa = to_plugin(a);
    uint64_t newly = 0;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.commit(pm->impl, &pa, range.offset, range.bytes, &newly, &st);
    dmm_status s = dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_commit of [%zu, +%zu) of the allocation at %p by "
                                                      "mechanism '%s'",
                                     range.offset, range.bytes, a->ptr, pm->name);
    if (s == DMM_OK) *newly_mapped = newly;
    return s;
}

static dmm_release_outcome pm_decommit(void *impl, const dmm_allocation *a, dmm_range range) {
    pmech *pm = impl;
    dmm_plugin_allocation pa = to_plugin(a);
    dmm_plugin_release_outcome po;
    outcome_init(&po);
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.decommit(pm->impl, &pa, range.offset, range.bytes, &po, &st);
    return read_outcome(pm, &po, &st, "dmm_mechanism_decommit", a);
}

static dmm_status pm_committed_bytes(void *impl, const dmm_allocation *a, uint64_t *bytes) {
    pmech *pm = impl;
    dmm_plugin_allocation pa = to_plugin(a);
    uint64_t v = 0;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.committed_bytes(pm->impl, &pa, &v, &st);
    dmm_status s = dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_committed_bytes of the allocation at %p by "
                                                      "mechanism '%s'",
                                     a->ptr, pm->name);
    if (s == DMM_OK) *bytes = v;
    return s;
}

static dmm_status pm_mapped_bytes_for_ranges(void *impl, const dmm_allocation *a, const dmm_range *ranges, size_t n,
                                             uint64_t *bytes) {
    pmech *pm = impl;
    uint64_t buf[16];
    uint64_t *flat = flatten(ranges, n, buf);
    if (flat == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                             "dmm_mechanism_mapped_bytes_for_ranges: mechanism '%s': no host memory for %zu ranges",
                             pm->name, n);
    dmm_plugin_allocation pa = to_plugin(a);
    uint64_t v = 0;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.mapped_bytes_for_ranges(pm->impl, &pa, flat, n, &v, &st);
    if (flat != buf) free(flat);
    dmm_status s = dmm__plugin_check(pm->plugin, &st,
                                     "dmm_mechanism_mapped_bytes_for_ranges (%zu ranges) of the allocation at %p by "
                                     "mechanism '%s'",
                                     n, a->ptr, pm->name);
    if (s == DMM_OK) *bytes = v;
    return s;
}

/* ---- the optional virtual-backing slots (since 1.1; each only where the plugin fills it) ---- */

static dmm_status pm_alias(void *impl, const dmm_allocation *a, dmm_range dst, dmm_range src) {
    pmech *pm = impl;
    size_t dend = 0, send = 0;
    bool inside = src.bytes > 0 && src.bytes == dst.bytes && !__builtin_add_overflow(src.offset, src.bytes, &send) &&
                  !__builtin_add_overflow(dst.offset, dst.bytes, &dend) && send <= a->bytes && dend <= a->bytes;
    if (!inside || (src.offset < dend && dst.offset < send))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "dmm_mechanism_alias of [%zu, +%zu) to [%zu, +%zu) in the allocation at %p (%zu bytes) "
                             "by mechanism '%s' refused: the ranges must be non-empty, of the same size, inside the "
                             "allocation and not overlap; nothing was changed",
                             src.offset, src.bytes, dst.offset, dst.bytes, a->ptr, a->bytes, pm->name);
    dmm_plugin_allocation pa = to_plugin(a);
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.alias(pm->impl, &pa, dst.offset, src.offset, src.bytes, &st);
    return dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_alias of [%zu, +%zu) to [%zu, +%zu) in the allocation at "
                                              "%p by mechanism '%s'",
                             src.offset, src.bytes, dst.offset, dst.bytes, a->ptr, pm->name);
}

static dmm_status pm_is_quarantined(void *impl, const void *ptr, size_t bytes, bool *out) {
    pmech *pm = impl;
    uint32_t q = DMM_PLUGIN_ANSWER_UNSET;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.is_quarantined(pm->impl, (uint64_t)(uintptr_t)ptr, bytes, &q, &st);
    dmm_status s = dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_is_quarantined of [%p, +%zu) by mechanism '%s'",
                                     ptr, bytes, pm->name);
    if (s != DMM_OK) return s;
    if (q > 1)
        return dmm_error_set(DMM_ERR_DRIVER,
                             "dmm_mechanism_is_quarantined of [%p, +%zu) by mechanism '%s': plugin '%s' (%s) reported "
                             "success but answered %u%s (the answer is 0 or 1)",
                             ptr, bytes, pm->name, pm->plugin->name, pm->plugin->path, (unsigned)q,
                             q == DMM_PLUGIN_ANSWER_UNSET ? ", the unset value" : "");
    *out = q == 1;
    return DMM_OK;
}

static dmm_status pm_drain_cache(void *impl) {
    pmech *pm = impl;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.drain_cache(pm->impl, &st);
    return dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_drain_cache of mechanism '%s'", pm->name);
}

static dmm_status pm_reservation(void *impl, uintptr_t *va, uint64_t *bytes) {
    pmech *pm = impl;
    uint64_t v = 0, n = 0;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    pm->pvb.reservation(pm->impl, &v, &n, &st);
    dmm_status s = dmm__plugin_check(pm->plugin, &st, "dmm_mechanism_reservation of mechanism '%s'", pm->name);
    if (s != DMM_OK) return s;
    if ((uint64_t)(uintptr_t)v != v)
        return dmm_error_set(DMM_ERR_DRIVER,
                             "dmm_mechanism_reservation of mechanism '%s': plugin '%s' (%s) answered va 0x%llx, which "
                             "is no address here",
                             pm->name, pm->plugin->name, pm->plugin->path, (unsigned long long)v);
    if (va != NULL) *va = (uintptr_t)v;
    if (bytes != NULL) *bytes = n;
    return DMM_OK;
}

/* ---- creation ---- */

/* Reads and checks the plugin's tables into pm; on failure the caller destroys the plugin's object
 * through pm->pops.destroy if the copy holds one. */
static dmm_status read_tables(pmech *pm, const dmm_plugin_mechanism_ops *theirs, const char *kind) {
    static const char op[] = "dmm_plugin_mechanism_create";
    const dmm_plugin *p = pm->plugin;
    size_t need = ops_size_for_minor(p->minor);
    dmm_plugin_mechanism_ops ops; /* locals of their own, so that a sanitizer sees any read past them */
    uint32_t announced = dmm__plugin_read(theirs, &ops, sizeof ops, need);
    pm->pops = ops;
    if (announced < need)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "%s: plugin '%s' (%s), kind '%s': its dmm_plugin_mechanism_ops says struct_size %u, "
                             "below the %zu bytes that plugin ABI %u.%u defines",
                             op, p->name, p->path, kind, announced, need, DMM_PLUGIN_ABI_MAJOR, p->minor);
    const dmm_plugin_mechanism_ops *o = &pm->pops;
    const char *missing = o->name == NULL       ? "name"
                          : o->allocate == NULL ? "allocate"
                          : o->release == NULL  ? "release"
                          : o->device == NULL   ? "device"
                          : o->destroy == NULL  ? "destroy"
                                                : NULL;
    if (missing != NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: plugin '%s' (%s), kind '%s': its mechanism table lacks the required slot '%s' "
                             "(name, allocate, release, device and destroy are required)",
                             op, p->name, p->path, kind, missing);
    size_t nlen = strnlen(o->name, sizeof pm->name);
    if (nlen == sizeof pm->name)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: plugin '%s' (%s), kind '%s': the mechanism's name is longer than %zu characters",
                             op, p->name, p->path, kind, sizeof pm->name - 1);
    memcpy(pm->name, o->name, nlen + 1);
    if (o->virtual_backing != NULL) {
        if ((p->info.capabilities & DMM_CAP_VIRTUAL_BACKING) == 0)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "%s: plugin '%s' (%s), kind '%s': the mechanism has a virtual_backing table but the "
                                 "plugin did not declare DMM_CAP_VIRTUAL_BACKING in its info->capabilities",
                                 op, p->name, p->path, kind);
        size_t vneed = VB_SIZE_REQUIRED;
        dmm_plugin_virtual_backing_ops vb;
        announced = dmm__plugin_read(o->virtual_backing, &vb, sizeof vb, vb_size_for_minor(p->minor));
        pm->pvb = vb;
        if (announced < vneed)
            return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                                 "%s: plugin '%s' (%s), kind '%s': its dmm_plugin_virtual_backing_ops says struct_size "
                                 "%u, below the %zu bytes of its required slots (those of plugin ABI %u.0)",
                                 op, p->name, p->path, kind, announced, vneed, DMM_PLUGIN_ABI_MAJOR);
        const dmm_plugin_virtual_backing_ops *v = &pm->pvb;
        missing = v->allocate_committed == NULL        ? "allocate_committed"
                  : v->commit == NULL                  ? "commit"
                  : v->decommit == NULL                ? "decommit"
                  : v->committed_bytes == NULL         ? "committed_bytes"
                  : v->mapped_bytes_for_ranges == NULL ? "mapped_bytes_for_ranges"
                                                       : NULL;
        if (missing != NULL)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "%s: plugin '%s' (%s), kind '%s': its virtual_backing table lacks the slot '%s'; a "
                                 "capability table fills every slot of 1.0 (or is NULL: absent); those of 1.1 are "
                                 "optional",
                                 op, p->name, p->path, kind, missing);
    }
    return DMM_OK;
}

static void build_host_table(pmech *pm) {
    dmm_mechanism_ops *h = &pm->ops;
    memset(h, 0, sizeof *h);
    h->size = (uint32_t)sizeof *h;
    h->name = pm->name;
    h->allocate = pm_allocate;
    h->release = pm_release;
    h->device = pm_device;
    h->stats = pm->pops.stats != NULL ? pm_stats : NULL; /* absent stays absent: UNSUPPORTED */
    h->destroy = pm_destroy;
    if (pm->pops.virtual_backing != NULL) {
        pm->vb = (dmm_virtual_backing_ops){.size = sizeof pm->vb,
                                           .allocate_committed = pm_allocate_committed,
                                           .commit = pm_commit,
                                           .decommit = pm_decommit,
                                           .committed_bytes = pm_committed_bytes,
                                           .mapped_bytes_for_ranges = pm_mapped_bytes_for_ranges};
        /* the optional slots only where the plugin filled them (pvb holds none above the agreed minor) */
        const dmm_plugin_virtual_backing_ops *v = &pm->pvb;
        pm->vb.alias = v->alias != NULL ? pm_alias : NULL;
        pm->vb.is_quarantined = v->is_quarantined != NULL ? pm_is_quarantined : NULL;
        pm->vb.drain_cache = v->drain_cache != NULL ? pm_drain_cache : NULL;
        pm->vb.reservation = v->reservation != NULL ? pm_reservation : NULL;
        h->virtual_backing = &pm->vb;
    }
}

static bool valid_tier(int32_t tier) {
    return tier == DMM_TIER_DEVICE || tier == DMM_TIER_HOST || tier == DMM_TIER_DISK;
}

dmm_status dmm_plugin_mechanism_create(dmm_plugin *p, const char *kind, dmm_driver *driver, const void *config,
                                       dmm_mechanism **out) {
    static const char op[] = "dmm_plugin_mechanism_create";
    if (p == NULL || kind == NULL || driver == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: plugin (%p), kind (%p), driver (%p) and out (%p) must be non-NULL", op, (void *)p,
                             (const void *)kind, (void *)driver, (void *)out);
    bool known = false;
    for (size_t i = 0; i < p->kind_count && !known; i++) known = strcmp(p->kinds[i], kind) == 0;
    if (!known)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: plugin '%s' (%s) makes no mechanism of kind '%s' (it lists %zu kind%s, the first "
                             "'%s'); nothing was changed",
                             op, p->name, p->path, kind, p->kind_count, p->kind_count == 1 ? "" : "s", p->kinds[0]);
    pmech *pm = calloc(1, sizeof *pm);
    if (pm == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: plugin '%s', kind '%s': out of host memory", op, p->name, kind);
    pm->plugin = p;

    dmm_plugin_create_args args;
    memset(&args, 0, sizeof args);
    args.struct_size = (uint32_t)sizeof args;
    args.abi_minor = p->minor;
    args.kind = kind;
    args.driver = driver;
    args.config = config;
    const dmm_plugin_mechanism_ops *theirs = NULL;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    dmm__plugin_lock();
    p->mechanisms++; /* counted before the factory runs: an unload cannot slip in between */
    p->create(&args, &pm->impl, &theirs, &st);
    dmm__plugin_unlock();
    dmm_status s = dmm__plugin_check(p, &st, "%s of kind '%s'", op, kind);
    if (s == DMM_OK && (pm->impl == NULL || theirs == NULL))
        s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                          "%s: plugin '%s' (%s), kind '%s': dmm_plugin_create reported success but set impl %p and "
                          "ops %p (both are required)",
                          op, p->name, p->path, kind, pm->impl, (const void *)theirs);
    if (s != DMM_OK) {
        /* Nothing usable was made; an object without a table cannot be destroyed by the host. */
        dmm__plugin_lock();
        p->mechanisms--;
        dmm__plugin_unlock();
        free(pm);
        return s;
    }
    s = read_tables(pm, theirs, kind);
    if (s == DMM_OK) {
        int32_t tier = -1, index = -1;
        dmm__plugin_status_init(&st);
        pm->pops.device(pm->impl, &tier, &index, &st);
        s = dmm__plugin_check(p, &st, "%s of kind '%s': asking the mechanism's device", op, kind);
        if (s == DMM_OK && !valid_tier(tier))
            s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                              "%s: plugin '%s' (%s), kind '%s': the mechanism reports tier %d, which is no dmm_tier",
                              op, p->name, p->path, kind, (int)tier);
        pm->device = (dmm_device){(dmm_tier)tier, index};
    }
    if (s == DMM_OK) {
        build_host_table(pm);
        s = dmm_mechanism_create(&pm->ops, pm, out);
    }
    if (s != DMM_OK) {
        /* Undo the factory: the sentence above says why; the destroy's own failure is only logged. */
        if (pm->pops.destroy != NULL) {
            dmm_plugin_status dst;
            dmm__plugin_status_init(&dst);
            pm->pops.destroy(pm->impl, &dst);
            if (dst.code != DMM_OK)
                dmm__log(DMM_LOG_WARN, "%s: plugin '%s' (%s): destroying the refused mechanism of kind '%s' failed "
                                       "(code %d); its object leaks",
                         op, p->name, p->path, kind, (int)dst.code);
        }
        dmm__plugin_lock();
        p->mechanisms--;
        dmm__plugin_unlock();
        free(pm);
        return s;
    }
    return DMM_OK;
}
