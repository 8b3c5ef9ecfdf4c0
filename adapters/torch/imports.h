/* adapters/torch/imports.h — regions of another process (a holder: dmm hold) mapped into this
 * device's arena. Internal. */
#ifndef DMM_TORCH_IMPORTS_H
#define DMM_TORCH_IMPORTS_H

#include "dmm/share.h"
#include "types.h"

/* Maps `ex` (its descriptors stay the caller's) into the arena, read-only unless `writable`: *ptr is
 * its address. MAPPED is charged (the holder owns the memory); refused, changing nothing, with
 * dmm_import's sentence. */
dmm_status dmm__torch_import(tctx *c, const dmm_export *ex, bool writable, void **ptr);
/* Unmaps the region at `ptr` (the holder keeps it). UNKNOWN_ALLOCATION for an address no import
 * starts at; a release that was not COMPLETE reports its state's status with a sentence. */
dmm_status dmm__torch_unimport(tctx *c, void *ptr);
/* Unmaps every import (for destroy; ctx.lock held). */
void dmm__torch_imports_fini(tctx *c);

#endif /* DMM_TORCH_IMPORTS_H */
