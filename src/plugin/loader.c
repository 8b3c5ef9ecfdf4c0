/* SPDX-License-Identifier: Apache-2.0 */
/* src/plugin/loader.c — the plugin host: opens a plugin's shared object, negotiates the ABI, keeps
 * the list of loaded plugins, and closes a plugin only when nothing of it is alive (DESIGN §4.12).
 *
 * Idea: a plugin is untrusted data behind function pointers. Everything it hands over is read by the
 * copy rule (min(struct_size, what the agreed minor defines, sizeof local) bytes, cut to whole
 * pointer-sized words, into a zeroed local), every string it names (name, version, each kind) is copied bounded — never compared or
 * handed out where the plugin keeps it, so one without a NUL is refused, not read past — every
 * status it fills is checked (an unset one is a failure), and every refusal closes the library
 * again and leaves nothing behind. Negotiation: the major must be equal; the agreed minor is
 * min(host, plugin): neither side uses a slot or a field introduced after it.
 *
 * Trade-off: one process-wide lock serialises loads, unloads, factories and readiness questions:
 * they are rare, and a plugin's exports then never race with each other or with its unload. The
 * mechanisms a plugin makes are called without it (plugin_mechanism.c).
 *
 * Invariants (under the plugin lock):
 *   every dmm_plugin in `loaded` holds one dlopen reference on its lib;
 *   p->mechanisms = mechanisms made from p whose destroy has not succeeded;
 *   a library is closed for good (its last dmm_plugin unloaded) only when p->mechanisms = 0 and the
 *   plugin's dmm_plugin_can_unload answered DMM_OK.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/plugin_internal.h"

/* The 1.0 layouts are frozen, and so is what 1.1 appended: a change to dmm/plugin.h that moves a
 * field breaks the build here instead of every plugin built before it (LP64 numbers; a new minor
 * only appends). */
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(dmm_plugin_status) == 264, "dmm_plugin_status 1.0 layout");
_Static_assert(sizeof(dmm_plugin_host) == 24, "dmm_plugin_host 1.0 layout");
_Static_assert(DMM_PLUGIN_INFO_SIZE_1_0 == 40 && offsetof(dmm_plugin_info, name) == 16, "dmm_plugin_info 1.0");
_Static_assert(sizeof(dmm_plugin_allocation) == 40, "dmm_plugin_allocation 1.0 layout");
_Static_assert(sizeof(dmm_plugin_release_outcome) == 40, "dmm_plugin_release_outcome 1.0 layout");
_Static_assert(DMM_PLUGIN_MECHANISM_OPS_SIZE_1_0 == 64 && offsetof(dmm_plugin_mechanism_ops, allocate) == 16,
               "dmm_plugin_mechanism_ops 1.0 layout");
_Static_assert(DMM_PLUGIN_VIRTUAL_BACKING_SIZE_1_0 == 48, "dmm_plugin_virtual_backing_ops 1.0 layout");
_Static_assert(DMM_PLUGIN_CREATE_ARGS_SIZE_1_0 == 32, "dmm_plugin_create_args 1.0 layout");
/* 1.1 appends the optional virtual-backing slots after the 1.0 ones, and nothing else. */
_Static_assert(offsetof(dmm_plugin_virtual_backing_ops, alias) == 48 &&
                   offsetof(dmm_plugin_virtual_backing_ops, is_quarantined) == 56 &&
                   offsetof(dmm_plugin_virtual_backing_ops, drain_cache) == 64 &&
                   offsetof(dmm_plugin_virtual_backing_ops, reservation) == 72,
               "dmm_plugin_virtual_backing_ops 1.1 layout");
_Static_assert(DMM_PLUGIN_VIRTUAL_BACKING_SIZE_1_1 == 80 && sizeof(dmm_plugin_virtual_backing_ops) == 80,
               "dmm_plugin_virtual_backing_ops 1.1 size");
_Static_assert(sizeof(dmm_plugin_mechanism_ops) == DMM_PLUGIN_MECHANISM_OPS_SIZE_1_0 &&
                   sizeof(dmm_plugin_info) == DMM_PLUGIN_INFO_SIZE_1_0,
               "1.1 appends nothing to dmm_plugin_mechanism_ops or dmm_plugin_info");
#endif
_Static_assert(DMM_PLUGIN_VIRTUAL_BACKING_SIZE_1_0 <= offsetof(dmm_plugin_virtual_backing_ops, alias),
               "the 1.1 slots come after every 1.0 slot");
_Static_assert(offsetof(dmm_plugin_info, abi_major) == 8 && offsetof(dmm_plugin_host, abi_major) == 8,
               "the negotiation header (struct_size, abi_minor, abi_major) is the same in every major");

static dmm_lock plugin_lock = {PTHREAD_MUTEX_INITIALIZER};
static dmm_plugin *loaded; /* every live load (plugin_lock) */

void dmm__plugin_lock(void) { dmm_lock_acquire(&plugin_lock); }
void dmm__plugin_unlock(void) { dmm_lock_release(&plugin_lock); }

void dmm__plugin_status_init(dmm_plugin_status *st) {
    memset(st, 0, sizeof *st);
    st->struct_size = (uint32_t)sizeof *st;
    st->code = DMM_PLUGIN_STATUS_UNSET;
}

static const char *plugin_label(const dmm_plugin *p) { return p->name[0] != '\0' ? p->name : "(unnamed)"; }

/* Formats the failure of one plugin call; `who` names the plugin (or its file before negotiation). */
static dmm_status plugin_failure(const char *who, const char *path, const dmm_plugin_status *st, const char *what) {
    char label[DMM__PLUGIN_NAME_BYTES + 16];
    if (who[0] != '\0') snprintf(label, sizeof label, "plugin '%s'", who);
    else snprintf(label, sizeof label, "plugin file"); /* before negotiation: no name yet */
    char msg[DMM_PLUGIN_MESSAGE_BYTES];
    memcpy(msg, st->message, sizeof msg);
    msg[sizeof msg - 1] = '\0'; /* a plugin may forget the terminator */
    if (st->code == DMM_PLUGIN_STATUS_UNSET)
        return dmm_error_set(DMM_ERR_DRIVER,
                             "%s: %s (%s) did not set its status (every plugin call must set "
                             "status->code); read as a failure",
                             what, label, path);
    if (st->code <= 0 || st->code >= DMM_STATUS_COUNT)
        return dmm_error_set(DMM_ERR_DRIVER, "%s: %s (%s) failed with code %d, which is no dmm_status: %s",
                             what, label, path, (int)st->code, msg[0] != '\0' ? msg : "(no message)");
    return dmm_error_set((dmm_status)st->code, "%s: %s (%s) failed with %s: %s", what, label, path,
                         dmm_status_str((dmm_status)st->code), msg[0] != '\0' ? msg : "(no message)");
}

dmm_status dmm__plugin_check(const dmm_plugin *p, const dmm_plugin_status *st, const char *fmt, ...) {
    if (st->code == DMM_OK) return DMM_OK;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return plugin_failure(plugin_label(p), p->path, st, what);
}

uint32_t dmm__plugin_read(const void *src, void *local, size_t local_size, size_t max_for_minor) {
    uint32_t announced;
    memcpy(&announced, src, sizeof announced);
    size_t n = announced;
    if (n > local_size) n = local_size;
    if (n > max_for_minor) n = max_for_minor;
    /* whole pointer-sized words only: every struct of the ABI is pairs of uint32_t and pointers, so
     * a struct_size that ends inside a slot leaves that slot absent, never half a pointer */
    n -= n % sizeof(void *);
    memset(local, 0, local_size);
    memcpy(local, src, n);
    return announced;
}

/* Size of dmm_plugin_info that minor `minor` defines (1.1 appended nothing to it; a later minor
 * that does adds a case and its own DMM_PLUGIN_INFO_SIZE_1_<minor>). */
static size_t info_size_for_minor(uint32_t minor) {
    (void)minor;
    return DMM_PLUGIN_INFO_SIZE_1_0;
}

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* Bounded copy of a plugin's string into a host buffer; false if it has no NUL within the bound. */
static bool copy_bounded(char *dst, size_t cap, const char *src) {
    size_t n = strnlen(src, cap);
    if (n == cap) return false;
    memcpy(dst, src, n + 1);
    return true;
}

static size_t loads_of(void *lib) {
    size_t n = 0;
    for (const dmm_plugin *q = loaded; q != NULL; q = q->next)
        if (q->lib == lib) n++;
    return n;
}

/* Negotiates with an opened library; on success fills p (name, version, kinds, minor). */
static dmm_status negotiate(dmm_plugin *p, dmm_plugin_negotiate_fn *fn) {
    static const char op[] = "dmm_plugin_load";
    const char *path = p->path;
    dmm_plugin_host host;
    memset(&host, 0, sizeof host);
    host.struct_size = (uint32_t)sizeof host;
    host.abi_minor = DMM_PLUGIN_ABI_MINOR;
    host.abi_major = DMM_PLUGIN_ABI_MAJOR;
    host.dmm_version = dmm_version();
    host.dmm_version_string = dmm_version_string();
    const dmm_plugin_info *theirs = NULL;
    dmm_plugin_status st;
    dmm__plugin_status_init(&st);
    fn(&host, &theirs, &st);
    if (st.code != DMM_OK) return plugin_failure("", path, &st, "dmm_plugin_load: negotiation");
    if (theirs == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: plugin file '%s': dmm_plugin_negotiate reported success but set no info; a plugin "
                             "points *info at its dmm_plugin_info",
                             op, path);
    /* The header (struct_size, abi_minor, abi_major) is the same in every major: read it first. */
    uint32_t announced = theirs->struct_size;
    if (announced < DMM_PLUGIN_HEADER_SIZE)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "%s: plugin file '%s': its dmm_plugin_info says struct_size %u, shorter than the %zu "
                             "bytes of the version header; set .struct_size = sizeof(dmm_plugin_info)",
                             op, path, announced, DMM_PLUGIN_HEADER_SIZE);
    uint32_t header[3];
    memcpy(header, theirs, sizeof header);
    uint32_t their_minor = header[1], their_major = header[2];
    if (their_major != DMM_PLUGIN_ABI_MAJOR)
        return dmm_error_set(DMM_ERR_VERSION_MISMATCH,
                             "%s: plugin file '%s' speaks plugin ABI %u.%u but this dmm (%s) speaks %u.0 to "
                             "%u.%u: the major must be equal; rebuild the plugin against this dmm's dmm/plugin.h",
                             op, path, their_major, their_minor, dmm_version_string(), DMM_PLUGIN_ABI_MAJOR,
                             DMM_PLUGIN_ABI_MAJOR, DMM_PLUGIN_ABI_MINOR);
    uint32_t minor = min_u32(their_minor, DMM_PLUGIN_ABI_MINOR); /* a minor is a ceiling */
    size_t need = info_size_for_minor(minor);
    if (announced < need)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "%s: plugin file '%s': its dmm_plugin_info says struct_size %u, below the %zu bytes "
                             "that plugin ABI %u.%u defines; set .struct_size = sizeof(dmm_plugin_info)",
                             op, path, announced, need, DMM_PLUGIN_ABI_MAJOR, minor);
    dmm_plugin_info info; /* a local of its own, so that a sanitizer sees any read past it */
    dmm__plugin_read(theirs, &info, sizeof info, need);
    p->info = info;
    p->minor = minor;
    const char *missing = p->info.name == NULL      ? "name"
                          : p->info.version == NULL ? "version"
                          : p->info.kinds == NULL   ? "kinds"
                                                    : NULL;
    if (missing != NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: plugin file '%s': its dmm_plugin_info lacks the required field '%s' (NULL); name, "
                             "version and kinds are required",
                             op, path, missing);
    if (!copy_bounded(p->name, sizeof p->name, p->info.name) ||
        !copy_bounded(p->version, sizeof p->version, p->info.version))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: plugin file '%s': its name or version is longer than %d characters", op, path,
                             DMM__PLUGIN_NAME_BYTES - 1);
    size_t k = 0;
    while (k <= DMM__PLUGIN_MAX_KINDS && p->info.kinds[k] != NULL) k++;
    if (k == 0 || k > DMM__PLUGIN_MAX_KINDS)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "%s: plugin '%s' (%s) lists %s mechanism kinds; a plugin lists 1 to %d, NULL-terminated",
                             op, p->name, path, k == 0 ? "no" : "too many (or an unterminated list of)",
                             DMM__PLUGIN_MAX_KINDS);
    for (size_t i = 0; i < k; i++) {
        /* copied, never pointed into: a kind is compared and handed out, so it must end in bounds */
        bool copied = copy_bounded(p->kind_names[i], sizeof p->kind_names[i], p->info.kinds[i]);
        if (!copied)
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "%s: plugin '%s' (%s): its mechanism kind %zu (of %zu) is longer than %d characters "
                                 "(or not NUL-terminated); a kind is a NUL-terminated name of at most %d characters",
                                 op, p->name, path, i + 1, k, DMM__PLUGIN_NAME_BYTES - 1, DMM__PLUGIN_NAME_BYTES - 1);
        p->kinds[i] = p->kind_names[i];
    }
    p->kinds[k] = NULL;
    p->kind_count = k;
    return DMM_OK;
}

dmm_status dmm_plugin_load(const char *path, dmm_plugin **out) {
    static const char op[] = "dmm_plugin_load";
    if (path == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: path (%p) and out (%p) must be non-NULL", op,
                             (const void *)path, (void *)out);
    dmm_plugin *p = calloc(1, sizeof *p);
    char *copy = p != NULL ? strdup(path) : NULL;
    if (copy == NULL) {
        free(p);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "%s: '%s': out of host memory", op, path);
    }
    p->path = copy;
    dmm__plugin_lock();
    dlerror();
    p->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    dmm_status s = DMM_OK;
    if (p->lib == NULL) {
        const char *e = dlerror();
        s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                          "%s: cannot open plugin file '%s': %s; check the path and that it is a shared object "
                          "built for this machine",
                          op, path, e != NULL ? e : "unknown dlopen error");
        goto fail;
    }
    static const char *const names[3] = {DMM_PLUGIN_NEGOTIATE_SYMBOL, DMM_PLUGIN_CREATE_SYMBOL,
                                         DMM_PLUGIN_CAN_UNLOAD_SYMBOL};
    void *syms[3];
    for (int i = 0; i < 3; i++) {
        syms[i] = dlsym(p->lib, names[i]);
        if (syms[i] == NULL) {
            s = dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                              "%s: plugin file '%s' lacks the required export '%s'; a dmm plugin defines "
                              "dmm_plugin_negotiate, dmm_plugin_create and dmm_plugin_can_unload (dmm/plugin.h)",
                              op, path, names[i]);
            goto fail;
        }
    }
    /* POSIX: a data pointer from dlsym converts to a function pointer of the right type. */
    dmm_plugin_negotiate_fn *negotiate_fn;
    memcpy(&negotiate_fn, &syms[0], sizeof negotiate_fn);
    memcpy(&p->create, &syms[1], sizeof p->create);
    memcpy(&p->can_unload, &syms[2], sizeof p->can_unload);
    s = negotiate(p, negotiate_fn);
    if (s != DMM_OK) goto fail;
    p->next = loaded;
    loaded = p;
    dmm__plugin_unlock();
    *out = p;
    return DMM_OK;
fail:
    if (p->lib != NULL) dlclose(p->lib);
    dmm__plugin_unlock();
    free(p->path);
    free(p);
    return s;
}

dmm_status dmm_plugin_unload(dmm_plugin *p) {
    static const char op[] = "dmm_plugin_unload";
    if (p == NULL) return DMM_OK;
    dmm__plugin_lock();
    if (p->mechanisms > 0) {
        size_t n = p->mechanisms;
        dmm__plugin_unlock();
        return dmm_error_set(DMM_ERR_BUSY,
                             "%s: plugin '%s' (%s) still has %zu live mechanism%s; destroy %s "
                             "(dmm_mechanism_destroy) and retry; nothing was changed",
                             op, plugin_label(p), p->path, n, n == 1 ? "" : "s", n == 1 ? "it" : "them");
    }
    /* Another load of the same file keeps the library mapped: only the last one asks the plugin. */
    if (loads_of(p->lib) == 1) {
        dmm_plugin_status st;
        dmm__plugin_status_init(&st);
        p->can_unload(&st);
        if (st.code != DMM_OK) {
            dmm_status s = dmm__plugin_check(p, &st, "%s: the plugin's unload readiness (it still owns something "
                                                     "or did not answer; nothing was changed)",
                                             op);
            dmm__plugin_unlock();
            return s;
        }
    }
    dmm_plugin **link = &loaded;
    while (*link != p) link = &(*link)->next;
    *link = p->next;
    if (dlclose(p->lib) != 0) {
        const char *e = dlerror();
        dmm_log(DMM_LOG_WARN, "%s: dlclose of plugin '%s' (%s) failed: %s", op, plugin_label(p), p->path,
                 e != NULL ? e : "unknown error");
    }
    dmm__plugin_unlock();
    free(p->path);
    free(p);
    return DMM_OK;
}

const char *dmm_plugin_name(const dmm_plugin *p) { return p != NULL ? p->name : "(null plugin)"; }
const char *dmm_plugin_version(const dmm_plugin *p) { return p != NULL ? p->version : ""; }
const char *dmm_plugin_path(const dmm_plugin *p) { return p != NULL ? p->path : ""; }
uint32_t dmm_plugin_abi_minor(const dmm_plugin *p) { return p != NULL ? p->minor : 0; }
uint32_t dmm_plugin_capabilities(const dmm_plugin *p) { return p != NULL ? p->info.capabilities : 0; }
size_t dmm_plugin_kind_count(const dmm_plugin *p) { return p != NULL ? p->kind_count : 0; }
const char *dmm_plugin_kind(const dmm_plugin *p, size_t i) {
    return p != NULL && i < p->kind_count ? p->kinds[i] : NULL;
}

size_t dmm_plugin_live_mechanisms(const dmm_plugin *p) {
    if (p == NULL) return 0;
    dmm__plugin_lock();
    size_t n = p->mechanisms;
    dmm__plugin_unlock();
    return n;
}
