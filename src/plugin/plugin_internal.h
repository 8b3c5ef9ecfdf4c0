/* SPDX-License-Identifier: Apache-2.0 */
/* src/plugin/plugin_internal.h — what the loader (loader.c) and the mechanism wrapper
 * (plugin_mechanism.c) share. Never installed.
 *
 * One process-wide lock (dmm__plugin_lock) guards the list of loaded plugins, every dmm_plugin's
 * `mechanisms` count, and every call of a plugin's exports (negotiate, create, can_unload): they run
 * one at a time. Mechanism slots are called without it. Lock order: the plugin lock is outermost of
 * the ones dmm takes (a factory may create its own objects under it, never a dmm pool or provider).
 */
#ifndef DMM_PLUGIN_INTERNAL_H
#define DMM_PLUGIN_INTERNAL_H

#include "core/core.h"
#include "dmm/plugin.h"

#define DMM__PLUGIN_MAX_KINDS 32
#define DMM__PLUGIN_NAME_BYTES 64

struct dmm_plugin {
    void *lib;                                   /* dlopen handle (shared by loads of one file) */
    char *path;                                  /* as given to dmm_plugin_load (owned copy) */
    dmm_plugin_create_fn *create;
    dmm_plugin_can_unload_fn *can_unload;
    dmm_plugin_info info;                        /* zeroed local copy, min(struct_size, agreed size) */
    uint32_t minor;                              /* agreed: min(DMM_PLUGIN_ABI_MINOR, info.abi_minor) */
    char name[DMM__PLUGIN_NAME_BYTES];           /* bounded copies of info.name / info.version */
    char version[DMM__PLUGIN_NAME_BYTES];
    char kind_names[DMM__PLUGIN_MAX_KINDS][DMM__PLUGIN_NAME_BYTES]; /* bounded copies of info.kinds[i] */
    const char *kinds[DMM__PLUGIN_MAX_KINDS + 1]; /* into kind_names, NULL-terminated */
    size_t kind_count;
    size_t mechanisms;                           /* live mechanisms made from this load (lock) */
    struct dmm_plugin *next;                     /* the list of loaded plugins (lock) */
};

void dmm__plugin_lock(void);
void dmm__plugin_unlock(void);

/* A status lent to the plugin: struct_size = sizeof, code = UNSET, message empty. */
void dmm__plugin_status_init(dmm_plugin_status *st);

/* DMM_OK when st->code is DMM_OK; otherwise sets the last error to "<what>: plugin '<name>' (<path>)
 * failed with <CODE>: <message>" (what = the printf-formatted operation) and returns the code, or
 * DMM_ERR_DRIVER for an unset status or a code that is not a dmm_status. */
dmm_status dmm__plugin_check(const dmm_plugin *p, const dmm_plugin_status *st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Copies min(struct_size, cap) bytes of a struct the plugin handed over into a zeroed local of
 * `local_size` bytes, where cap = min(local_size, max_for_minor): a field above the agreed minor is
 * never read. The count is cut to whole pointer-sized words: a slot that the announced size ends
 * inside stays zero (absent). Returns the struct_size the plugin announced. */
uint32_t dmm__plugin_read(const void *src, void *local, size_t local_size, size_t max_for_minor);

#endif /* DMM_PLUGIN_INTERNAL_H */
