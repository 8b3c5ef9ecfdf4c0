/* SPDX-License-Identifier: Apache-2.0 */
/* src/driver/host.c — the `host` driver: real memory with real VMM semantics on any Linux machine.
 *
 * Idea: a VA reservation is an anonymous PROT_NONE, MAP_NORESERVE mapping (costs no memory); a
 * physical handle is one memfd of the chunk's size; map = mmap(MAP_FIXED|MAP_SHARED) of the memfd
 * over the reserved hole with PROT_NONE (like cuMemMap, access comes from set_access = mprotect);
 * unmap = an anonymous PROT_NONE mapping back over it, so the hole stays reserved. Export = a new
 * descriptor of the memfd (read-only opened for READ access); import = our own dup of a descriptor
 * another process sent, filed as a handle like any other. Eager memory is
 * a private anonymous mapping. Copies are synchronous memmove, so every event is complete at once.
 *
 * Trade-off: the driver keeps its own tables (reservations, handles, mappings, eager blocks,
 * streams, events) so that it can refuse what CUDA would refuse (a map outside a reservation, an
 * unmap that does not match one map, a release of a mapped handle, an unreserve of a range with
 * mappings) instead of silently corrupting the address space, and so that census() is exact.
 * The tables are sorted arrays (binary search, O(n) insert): chunk counts are small.
 *
 * Invariants (under `lock`):
 *   census.reserved_bytes = Σ reservation.bytes
 *   census.handles        = live handle slots;  census.handle_bytes = Σ their bytes
 *   census.imported_*     = the same over the slots with .imported
 *   census.mapped_bytes   = Σ mapping.bytes;     handle.maps = #mappings naming it
 *   reservation.maps      = #mappings inside it; mappings never overlap
 *   census.eager_bytes    = Σ eager.bytes
 * A dmm_phys is (generation << 32 | slot + 1): 0 is never valid and a released handle's value is
 * never valid again.
 *
 * Locking: one mutex for the tables. VMM syscalls that must agree with the tables (map, unmap,
 * set_access, unreserve) run under it; syscalls that create something new (reserve, create,
 * alloc) run outside it and are undone if the record cannot be inserted.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "core/sorted.h"
#include "dmm/driver.h"

#define HOST_DEFAULT_GRANULARITY ((size_t)2 << 20)

/* ---- a sorted array keyed by address ---- */
typedef struct hentry {
    uintptr_t key; /* address */
    uint64_t a;    /* bytes */
    uint64_t b;    /* reservation: mappings inside; mapping: the dmm_phys */
} hentry;

typedef struct hvec {
    hentry *v;
    size_t n, cap;
} hvec;

/* First index whose key is at or after `key` (the one search: core/sorted.h). */
static size_t hvec_lower(const hvec *h, uintptr_t key) { return DMM_LOWER_BOUND(h->v, h->n, hentry, key, key); }

/* Index of the entry with exactly `key`, or SIZE_MAX. */
static size_t hvec_find(const hvec *h, uintptr_t key) {
    size_t i = hvec_lower(h, key);
    return i < h->n && h->v[i].key == key ? i : SIZE_MAX;
}

/* Index of the last entry with key <= addr, or SIZE_MAX. */
static size_t hvec_floor(const hvec *h, uintptr_t addr) {
    size_t i = hvec_lower(h, addr);
    if (i < h->n && h->v[i].key == addr) return i;
    return i == 0 ? SIZE_MAX : i - 1;
}

static bool hvec_reserve(hvec *h, size_t extra) {
    if (h->n + extra <= h->cap) return true;
    size_t cap = h->cap ? h->cap * 2 : 16;
    while (cap < h->n + extra) cap *= 2;
    hentry *v = realloc(h->v, cap * sizeof *v);
    if (v == NULL) return false;
    h->v = v;
    h->cap = cap;
    return true;
}

/* Needs room (hvec_reserve) first. */
static void hvec_insert(hvec *h, hentry e) {
    size_t i = hvec_lower(h, e.key);
    memmove(&h->v[i + 1], &h->v[i], (h->n - i) * sizeof *h->v);
    h->v[i] = e;
    h->n++;
}

static void hvec_remove(hvec *h, size_t i) {
    memmove(&h->v[i], &h->v[i + 1], (h->n - i - 1) * sizeof *h->v);
    h->n--;
}

/* ---- the driver object ---- */
typedef struct host_handle {
    int fd;        /* -1 when the slot is free */
    uint32_t gen;  /* bumped at release: stale dmm_phys values never validate */
    uint32_t maps; /* mappings of this handle */
    uint64_t bytes;
    bool imported; /* made by import_handle: another process's memory (census.imported_*) */
} host_handle;

typedef struct host_driver {
    dmm_driver base; /* first: the dmm_driver the caller sees */
    size_t granularity;
    size_t page;
    dmm_lock lock;
    hvec reservations; /* key va, a bytes, b mappings inside */
    hvec mappings;     /* key va, a bytes, b dmm_phys */
    hvec eager;        /* key ptr, a bytes */
    hvec streams;      /* key token */
    hvec events;       /* key token */
    host_handle *handles;
    size_t nhandles, caphandles;
    uint32_t *free_slots; /* stack of free handle slots */
    size_t nfree;
    dmm_driver_census tally; /* .size unused */
} host_driver;

typedef struct host_event {
    uint64_t recorded; /* times recorded (host work is synchronous: always complete) */
} host_event;

static host_driver *H(dmm_driver *d) { return (host_driver *)d; }

static const char *errtext(int e, char *buf, size_t cap) {
    /* GNU strerror_r (we build with _GNU_SOURCE): returns the text, maybe not in buf */
    const char *s = strerror_r(e, buf, cap);
    return s;
}

static dmm_status status_of_errno(int e) {
    return e == ENOMEM || e == ENOSPC ? DMM_ERR_OUT_OF_MEMORY : DMM_ERR_DRIVER;
}

#define HOST_SYSERR(e, fmt, ...)                                                                    \
    do {                                                                                            \
        char eb_[128];                                                                              \
        return dmm_error_set(status_of_errno(e), "host driver: " fmt ": errno %d (%s)", __VA_ARGS__, \
                             (e), errtext((e), eb_, sizeof eb_));                                   \
    } while (0)

static bool is_granule_multiple(const host_driver *h, uint64_t x) { return (x & (h->granularity - 1)) == 0; }

static bool range_end(uintptr_t va, size_t bytes, uintptr_t *end) {
    return !__builtin_add_overflow(va, bytes, end);
}

static int prot_of(dmm_access a) {
    switch (a) {
    case DMM_ACCESS_NONE: return PROT_NONE;
    case DMM_ACCESS_READ: return PROT_READ;
    case DMM_ACCESS_READ_WRITE: return PROT_READ | PROT_WRITE;
    }
    return -1;
}

/* Index of the reservation containing [va, va+bytes), or SIZE_MAX. Under the lock. */
static size_t find_reservation(const host_driver *h, uintptr_t va, size_t bytes) {
    uintptr_t end;
    if (!range_end(va, bytes, &end)) return SIZE_MAX;
    size_t i = hvec_floor(&h->reservations, va);
    if (i == SIZE_MAX) return SIZE_MAX;
    const hentry *r = &h->reservations.v[i];
    return end <= r->key + r->a ? i : SIZE_MAX;
}

/* The handle slot for `phys`, or NULL. Under the lock. */
static host_handle *find_handle(host_driver *h, dmm_phys phys) {
    uint64_t slot = phys & 0xffffffffu;
    if (slot == 0 || slot > h->nhandles) return NULL;
    host_handle *hh = &h->handles[slot - 1];
    if (hh->fd < 0 || hh->gen != (uint32_t)(phys >> 32)) return NULL;
    return hh;
}

/* Validates (va, bytes) for map/unmap/set_access: non-zero, granule multiples, inside one
 * reservation. Returns the reservation index or SIZE_MAX after setting the error. Under the lock. */
static size_t check_vmm_range(host_driver *h, const char *op, uintptr_t va, size_t bytes) {
    if (bytes == 0 || !is_granule_multiple(h, va) || !is_granule_multiple(h, bytes)) {
        dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                      "host driver: %s of %zu bytes at %#llx refused: the address and size must be "
                      "non-zero multiples of the granularity (%zu bytes)",
                      op, bytes, (unsigned long long)va, h->granularity);
        return SIZE_MAX;
    }
    size_t r = find_reservation(h, va, bytes);
    if (r == SIZE_MAX)
        dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                      "host driver: %s of %zu bytes at %#llx refused: the range is not inside one "
                      "reservation of this driver; reserve the VA first",
                      op, bytes, (unsigned long long)va);
    return r;
}

/* ---- ops ---- */
static dmm_status host_granularity(dmm_driver *d, size_t *bytes) {
    if (bytes == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "host driver: granularity: the output pointer is NULL");
    *bytes = H(d)->granularity;
    return DMM_OK;
}

static dmm_status host_reserve(dmm_driver *d, size_t bytes, size_t align, uintptr_t *va) {
    host_driver *h = H(d);
    if (va == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "host driver: reserve: the output pointer is NULL");
    if (bytes == 0 || !is_granule_multiple(h, bytes))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: reserve of %zu bytes refused: the size must be a non-zero "
                             "multiple of the granularity (%zu bytes)",
                             bytes, h->granularity);
    if (align != 0 && !dmm_is_pow2(align))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: reserve of %zu bytes refused: alignment %zu is not a power of "
                             "two (pass 0 for the granularity)",
                             bytes, align);
    if (align < h->granularity) align = h->granularity;
    size_t total;
    if (__builtin_add_overflow(bytes, align, &total))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: reserve of %zu bytes aligned to %zu overflows the address space",
                             bytes, align);
    void *p = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        HOST_SYSERR(e, "reserve of %zu bytes aligned to %zu failed in mmap(PROT_NONE, MAP_NORESERVE)", bytes,
                    align);
    }
    uintptr_t base = (uintptr_t)p;
    uintptr_t start = (base + align - 1) & ~(uintptr_t)(align - 1);
    if (start > base) munmap(p, start - base);
    uintptr_t tail = start + bytes, mend = base + total;
    if (mend > tail) munmap((void *)tail, mend - tail);

    dmm_lock_acquire(&h->lock);
    bool ok = hvec_reserve(&h->reservations, 1);
    if (ok) {
        hvec_insert(&h->reservations, (hentry){start, bytes, 0});
        h->tally.reserved_bytes += bytes;
    }
    dmm_lock_release(&h->lock);
    if (!ok) {
        munmap((void *)start, bytes);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                             "host driver: reserve of %zu bytes: no memory for the reservation table", bytes);
    }
    *va = start;
    return DMM_OK;
}

static dmm_status host_unreserve(dmm_driver *d, uintptr_t va, size_t bytes) {
    host_driver *h = H(d);
    dmm_lock_acquire(&h->lock);
    size_t i = hvec_find(&h->reservations, va);
    if (i == SIZE_MAX || h->reservations.v[i].a != bytes) {
        dmm_lock_release(&h->lock);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: unreserve of %zu bytes at %#llx refused: no reservation of this "
                             "driver starts there with that size",
                             bytes, (unsigned long long)va);
    }
    uint64_t maps = h->reservations.v[i].b;
    if (maps != 0) {
        dmm_lock_release(&h->lock);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: unreserve of %zu bytes at %#llx refused: %llu mapping(s) are still "
                             "inside; unmap them first",
                             bytes, (unsigned long long)va, (unsigned long long)maps);
    }
    if (munmap((void *)va, bytes) != 0) {
        int e = errno;
        dmm_lock_release(&h->lock);
        HOST_SYSERR(e, "unreserve of %zu bytes at %#llx failed in munmap", bytes, (unsigned long long)va);
    }
    hvec_remove(&h->reservations, i);
    h->tally.reserved_bytes -= bytes;
    dmm_lock_release(&h->lock);
    return DMM_OK;
}

/* Files `fd` (owned from now on) as a live handle of `bytes`; closes it when there is no room. */
static dmm_status insert_handle(host_driver *h, int fd, size_t bytes, bool imported, const char *op,
                                dmm_phys *handle) {
    dmm_lock_acquire(&h->lock);
    uint32_t slot;
    bool ok = true;
    if (h->nfree > 0) {
        slot = h->free_slots[--h->nfree];
    } else if (h->nhandles >= 0xfffffffeu) {
        ok = false;
        slot = 0;
    } else {
        if (h->nhandles == h->caphandles) {
            size_t cap = h->caphandles ? h->caphandles * 2 : 64;
            host_handle *nh = realloc(h->handles, cap * sizeof *nh);
            uint32_t *nf = nh ? realloc(h->free_slots, cap * sizeof *nf) : NULL;
            if (nh) h->handles = nh;
            if (nf) {
                h->free_slots = nf;
                h->caphandles = cap;
            } else {
                ok = false;
            }
        }
        slot = (uint32_t)h->nhandles;
        if (ok) {
            h->handles[slot] = (host_handle){-1, 0, 0, 0, false};
            h->nhandles++;
        }
    }
    dmm_phys phys = 0;
    if (ok) {
        host_handle *hh = &h->handles[slot];
        hh->fd = fd;
        hh->maps = 0;
        hh->bytes = bytes;
        hh->imported = imported;
        phys = ((uint64_t)hh->gen << 32) | ((uint64_t)slot + 1);
        h->tally.handles++;
        h->tally.handle_bytes += bytes;
        h->tally.imported_handles += imported;
        h->tally.imported_bytes += imported ? bytes : 0;
    }
    dmm_lock_release(&h->lock);
    if (!ok) {
        close(fd);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "host driver: %s of %zu bytes: no memory for the handle table",
                             op, bytes);
    }
    *handle = phys;
    return DMM_OK;
}

static dmm_status host_create(dmm_driver *d, size_t bytes, dmm_phys *handle) {
    host_driver *h = H(d);
    if (handle == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "host driver: create: the output handle pointer is NULL");
    if (bytes == 0 || !is_granule_multiple(h, bytes))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: create of %zu bytes refused: the size must be a non-zero multiple "
                             "of the granularity (%zu bytes)",
                             bytes, h->granularity);
    int fd = memfd_create("dmm-host-chunk", MFD_CLOEXEC | MFD_ALLOW_SEALING); /* the holder seals what it shares */
    if (fd < 0) {
        int e = errno;
        HOST_SYSERR(e, "create of %zu bytes failed in memfd_create", bytes);
    }
    if (ftruncate(fd, (off_t)bytes) != 0) {
        int e = errno;
        close(fd);
        HOST_SYSERR(e, "create of %zu bytes failed in ftruncate of the memfd", bytes);
    }
    return insert_handle(h, fd, bytes, false, "create", handle);
}

/* Export: the memfd itself, as a new descriptor; read-only access is a read-only open of it, so the
 * kernel refuses a writable mapping in the importer (mprotect answers EACCES). */
static dmm_status host_export(dmm_driver *d, dmm_phys handle, dmm_access access, int *fd) {
    host_driver *h = H(d);
    if (fd == NULL || (access != DMM_ACCESS_READ && access != DMM_ACCESS_READ_WRITE))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: export of handle %#llx refused: the access must be READ or READ_WRITE "
                             "(got %d) and the output descriptor pointer non-NULL",
                             (unsigned long long)handle, (int)access);
    dmm_lock_acquire(&h->lock);
    host_handle *hh = find_handle(h, handle);
    int out = -1, e = 0;
    if (hh != NULL && access == DMM_ACCESS_READ_WRITE) {
        out = fcntl(hh->fd, F_DUPFD_CLOEXEC, 0);
    } else if (hh != NULL) {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", hh->fd);
        out = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (hh != NULL && out < 0) e = errno;
    dmm_lock_release(&h->lock);
    if (hh == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: export of handle %#llx refused: no live handle of this driver has that "
                             "value", (unsigned long long)handle);
    if (out < 0) HOST_SYSERR(e, "export of handle %#llx failed to open a new descriptor", (unsigned long long)handle);
    *fd = out;
    return DMM_OK;
}

/* Import: our own descriptor of the memory (the caller keeps theirs), checked to be a file of exactly
 * `bytes` whose open mode allows `access`. */
static dmm_status host_import(dmm_driver *d, int fd, size_t bytes, dmm_access access, dmm_phys *handle) {
    host_driver *h = H(d);
    if (handle == NULL || fd < 0 || bytes == 0 || !is_granule_multiple(h, bytes) ||
        (access != DMM_ACCESS_READ && access != DMM_ACCESS_READ_WRITE))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: import of descriptor %d (%zu bytes, access %d) refused: the descriptor "
                             "must be valid, the size a non-zero multiple of the granularity (%zu bytes), the "
                             "access READ or READ_WRITE and the output non-NULL",
                             fd, bytes, (int)access, h->granularity);
    struct stat st;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        HOST_SYSERR(e, "import of descriptor %d failed to inspect it (fcntl/fstat)", fd);
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != bytes)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: import of descriptor %d refused: it is %s of %lld bytes, not a memory "
                             "file of the %zu bytes described; the description and the descriptor disagree",
                             fd, S_ISREG(st.st_mode) ? "a file" : "not a regular file", (long long)st.st_size, bytes);
    if (access == DMM_ACCESS_READ_WRITE && (fl & O_ACCMODE) != O_RDWR)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: import of descriptor %d read-write refused: the exporter handed out a "
                             "read-only descriptor; import it READ, or ask the exporter for read-write access", fd);
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) {
        int e = errno;
        HOST_SYSERR(e, "import of descriptor %d failed to duplicate it", fd);
    }
    return insert_handle(h, own, bytes, true, "import", handle);
}

static dmm_status host_release(dmm_driver *d, dmm_phys handle) {
    host_driver *h = H(d);
    dmm_lock_acquire(&h->lock);
    host_handle *hh = find_handle(h, handle);
    if (hh == NULL) {
        dmm_lock_release(&h->lock);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: release of handle %#llx refused: no live handle of this driver "
                             "has that value (already released, or never created)",
                             (unsigned long long)handle);
    }
    if (hh->maps != 0) {
        uint32_t maps = hh->maps;
        dmm_lock_release(&h->lock);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: release of handle %#llx refused: it is still mapped %u time(s); "
                             "unmap it first",
                             (unsigned long long)handle, maps);
    }
    int fd = hh->fd;
    h->tally.handles--;
    h->tally.handle_bytes -= hh->bytes;
    h->tally.imported_handles -= hh->imported;
    h->tally.imported_bytes -= hh->imported ? hh->bytes : 0;
    hh->fd = -1;
    hh->gen++;
    hh->bytes = 0;
    h->free_slots[h->nfree++] = (uint32_t)(hh - h->handles);
    dmm_lock_release(&h->lock);
    close(fd); /* the memory goes when the last mapping and fd are gone; none is mapped */
    return DMM_OK;
}

static dmm_status host_map(dmm_driver *d, uintptr_t va, size_t bytes, dmm_phys handle) {
    host_driver *h = H(d);
    dmm_lock_acquire(&h->lock);
    size_t r = check_vmm_range(h, "map", va, bytes);
    if (r == SIZE_MAX) {
        dmm_lock_release(&h->lock);
        return DMM_ERR_INVALID_ARGUMENT;
    }
    host_handle *hh = find_handle(h, handle);
    if (hh == NULL) {
        dmm_lock_release(&h->lock);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: map of handle %#llx at %#llx refused: no live handle of this "
                             "driver has that value",
                             (unsigned long long)handle, (unsigned long long)va);
    }
    if (hh->bytes != bytes) {
        uint64_t hb = hh->bytes;
        dmm_lock_release(&h->lock);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: map of %zu bytes at %#llx refused: handle %#llx has %llu bytes; a "
                             "map covers the whole handle",
                             bytes, (unsigned long long)va, (unsigned long long)handle, (unsigned long long)hb);
    }
    size_t i = hvec_lower(&h->mappings, va);
    bool overlap = (i < h->mappings.n && h->mappings.v[i].key < va + bytes) ||
                   (i > 0 && h->mappings.v[i - 1].key + h->mappings.v[i - 1].a > va);
    if (overlap) {
        dmm_lock_release(&h->lock);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: map of %zu bytes at %#llx refused: the range overlaps an existing "
                             "mapping; unmap it first",
                             bytes, (unsigned long long)va);
    }
    if (!hvec_reserve(&h->mappings, 1)) {
        dmm_lock_release(&h->lock);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY,
                             "host driver: map of %zu bytes at %#llx: no memory for the mapping table", bytes,
                             (unsigned long long)va);
    }
    void *p = mmap((void *)va, bytes, PROT_NONE, MAP_FIXED | MAP_SHARED, hh->fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        int fd = hh->fd;
        dmm_lock_release(&h->lock);
        HOST_SYSERR(e, "map of %zu bytes at %#llx failed in mmap(MAP_FIXED|MAP_SHARED) of memfd %d", bytes,
                    (unsigned long long)va, fd);
    }
    hvec_insert(&h->mappings, (hentry){va, bytes, handle});
    hh->maps++;
    h->reservations.v[r].b++;
    h->tally.mapped_bytes += bytes;
    dmm_lock_release(&h->lock);
    return DMM_OK;
}

static dmm_status host_unmap(dmm_driver *d, uintptr_t va, size_t bytes) {
    host_driver *h = H(d);
    dmm_lock_acquire(&h->lock);
    size_t r = check_vmm_range(h, "unmap", va, bytes);
    if (r == SIZE_MAX) {
        dmm_lock_release(&h->lock);
        return DMM_ERR_INVALID_ARGUMENT;
    }
    size_t i = hvec_find(&h->mappings, va);
    if (i == SIZE_MAX || h->mappings.v[i].a != bytes) {
        dmm_lock_release(&h->lock);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: unmap of %zu bytes at %#llx refused: it does not match exactly one "
                             "earlier map (same address and size)",
                             bytes, (unsigned long long)va);
    }
    void *p = mmap((void *)va, bytes, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        dmm_lock_release(&h->lock);
        HOST_SYSERR(e, "unmap of %zu bytes at %#llx failed in mmap(PROT_NONE, MAP_FIXED) over the mapping", bytes,
                    (unsigned long long)va);
    }
    host_handle *hh = find_handle(h, h->mappings.v[i].b);
    if (hh != NULL) hh->maps--; /* always found: a mapped handle cannot be released */
    hvec_remove(&h->mappings, i);
    h->reservations.v[r].b--;
    h->tally.mapped_bytes -= bytes;
    dmm_lock_release(&h->lock);
    return DMM_OK;
}

static dmm_status host_set_access(dmm_driver *d, uintptr_t va, size_t bytes, dmm_access access) {
    host_driver *h = H(d);
    int prot = prot_of(access);
    if (prot < 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: set_access of %zu bytes at %#llx refused: access %d is not a "
                             "dmm_access value",
                             bytes, (unsigned long long)va, (int)access);
    dmm_lock_acquire(&h->lock);
    if (check_vmm_range(h, "set_access", va, bytes) == SIZE_MAX) {
        dmm_lock_release(&h->lock);
        return DMM_ERR_INVALID_ARGUMENT;
    }
    /* every byte must be mapped: mprotect of a reserved hole would turn it into private memory */
    uintptr_t cur = va, end = va + bytes;
    size_t j = hvec_floor(&h->mappings, cur);
    while (cur < end) {
        if (j == SIZE_MAX || j >= h->mappings.n || h->mappings.v[j].key > cur ||
            h->mappings.v[j].key + h->mappings.v[j].a <= cur) {
            dmm_lock_release(&h->lock);
            return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                 "host driver: set_access of %zu bytes at %#llx refused: %#llx is not mapped; "
                                 "map every chunk of the range first",
                                 bytes, (unsigned long long)va, (unsigned long long)cur);
        }
        cur = h->mappings.v[j].key + h->mappings.v[j].a;
        j++;
    }
    if (mprotect((void *)va, bytes, prot) != 0) {
        int e = errno;
        dmm_lock_release(&h->lock);
        HOST_SYSERR(e, "set_access of %zu bytes at %#llx failed in mprotect", bytes, (unsigned long long)va);
    }
    dmm_lock_release(&h->lock);
    return DMM_OK;
}

static dmm_status host_alloc(dmm_driver *d, size_t bytes, uintptr_t *ptr) {
    host_driver *h = H(d);
    if (ptr == NULL || bytes == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: alloc of %zu bytes refused: the size must be non-zero and the "
                             "output pointer non-NULL",
                             bytes);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        HOST_SYSERR(e, "alloc of %zu bytes failed in mmap", bytes);
    }
    dmm_lock_acquire(&h->lock);
    bool ok = hvec_reserve(&h->eager, 1);
    if (ok) {
        hvec_insert(&h->eager, (hentry){(uintptr_t)p, bytes, 0});
        h->tally.eager_bytes += bytes;
    }
    dmm_lock_release(&h->lock);
    if (!ok) {
        munmap(p, bytes);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "host driver: alloc of %zu bytes: no memory for the table",
                             bytes);
    }
    *ptr = (uintptr_t)p;
    return DMM_OK;
}

static dmm_status host_free(dmm_driver *d, uintptr_t ptr, size_t bytes) {
    host_driver *h = H(d);
    dmm_lock_acquire(&h->lock);
    size_t i = hvec_find(&h->eager, ptr);
    if (i == SIZE_MAX || h->eager.v[i].a != bytes) {
        dmm_lock_release(&h->lock);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: free of %zu bytes at %#llx refused: no eager allocation of this "
                             "driver starts there with that size",
                             bytes, (unsigned long long)ptr);
    }
    hvec_remove(&h->eager, i); /* claimed: a racing free of the same block finds nothing */
    dmm_lock_release(&h->lock);
    if (munmap((void *)ptr, bytes) != 0) {
        int e = errno;
        dmm_lock_acquire(&h->lock);
        if (hvec_reserve(&h->eager, 1)) hvec_insert(&h->eager, (hentry){ptr, bytes, 0}); /* room was there */
        dmm_lock_release(&h->lock);
        HOST_SYSERR(e, "free of %zu bytes at %#llx failed in munmap", bytes, (unsigned long long)ptr);
    }
    dmm_lock_acquire(&h->lock);
    h->tally.eager_bytes -= bytes;
    dmm_lock_release(&h->lock);
    return DMM_OK;
}

/* streams and events: heap tokens kept in a set, so that a foreign or destroyed one is refused */
static dmm_status token_create(host_driver *h, hvec *set, const char *what, size_t size, void **out) {
    if (out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "host driver: %s_create: the output pointer is NULL", what);
    void *t = calloc(1, size);
    if (t == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "host driver: %s_create: out of memory", what);
    dmm_lock_acquire(&h->lock);
    bool ok = hvec_reserve(set, 1);
    if (ok) hvec_insert(set, (hentry){(uintptr_t)t, 0, 0});
    dmm_lock_release(&h->lock);
    if (!ok) {
        free(t);
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "host driver: %s_create: out of memory", what);
    }
    *out = t;
    return DMM_OK;
}

static dmm_status token_destroy(host_driver *h, hvec *set, const char *what, void *t) {
    dmm_lock_acquire(&h->lock);
    size_t i = hvec_find(set, (uintptr_t)t);
    if (i != SIZE_MAX) hvec_remove(set, i);
    dmm_lock_release(&h->lock);
    if (i == SIZE_MAX)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: %s_destroy of %p refused: not a live %s of this driver", what, t, what);
    free(t);
    return DMM_OK;
}

static bool token_live(host_driver *h, hvec *set, const void *t) {
    dmm_lock_acquire(&h->lock);
    bool live = hvec_find(set, (uintptr_t)t) != SIZE_MAX;
    dmm_lock_release(&h->lock);
    return live;
}

static dmm_status check_stream(host_driver *h, const char *op, dmm_stream s) {
    if (s == NULL || token_live(h, &h->streams, s)) return DMM_OK;
    return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                         "host driver: %s refused: stream %p is not a live stream of this driver (NULL is the "
                         "default stream)",
                         op, s);
}

static dmm_status check_event(host_driver *h, const char *op, dmm_event e) {
    if (e != NULL && token_live(h, &h->events, e)) return DMM_OK;
    return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                         "host driver: %s refused: event %p is not a live event of this driver", op, e);
}

static dmm_status host_stream_create(dmm_driver *d, dmm_stream *stream) {
    return token_create(H(d), &H(d)->streams, "stream", 1, stream);
}
static dmm_status host_stream_destroy(dmm_driver *d, dmm_stream stream) {
    return token_destroy(H(d), &H(d)->streams, "stream", stream);
}
static dmm_status host_event_create(dmm_driver *d, dmm_event *event) {
    return token_create(H(d), &H(d)->events, "event", sizeof(host_event), event);
}
static dmm_status host_event_destroy(dmm_driver *d, dmm_event event) {
    return token_destroy(H(d), &H(d)->events, "event", event);
}
static dmm_status host_event_record(dmm_driver *d, dmm_event event, dmm_stream stream) {
    dmm_status s = check_event(H(d), "event_record", event);
    if (s == DMM_OK) s = check_stream(H(d), "event_record", stream);
    return s; /* host work is synchronous: the event is complete as soon as it is recorded */
}
static dmm_status host_event_query(dmm_driver *d, dmm_event event) {
    return check_event(H(d), "event_query", event);
}
static dmm_status host_event_synchronize(dmm_driver *d, dmm_event event) {
    return check_event(H(d), "event_synchronize", event);
}
static dmm_status host_copy(dmm_driver *d, uintptr_t dst, uintptr_t src, size_t bytes, dmm_stream stream) {
    dmm_status s = check_stream(H(d), "copy", stream);
    if (s != DMM_OK) return s;
    if (bytes == 0) return DMM_OK;
    if (dst == 0 || src == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                             "host driver: copy of %zu bytes from %#llx to %#llx refused: NULL address", bytes,
                             (unsigned long long)src, (unsigned long long)dst);
    memmove((void *)dst, (const void *)src, bytes);
    return DMM_OK;
}
static dmm_status host_stream_synchronize(dmm_driver *d, dmm_stream stream) {
    return check_stream(H(d), "stream_synchronize", stream);
}

static dmm_status host_mem_info(dmm_driver *d, uint64_t *free_bytes, uint64_t *total_bytes) {
    (void)d;
    if (free_bytes == NULL || total_bytes == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "host driver: mem_info: an output pointer is NULL");
    FILE *f = fopen("/proc/meminfo", "re");
    if (f == NULL) {
        int e = errno;
        HOST_SYSERR(e, "mem_info failed to open %s", "/proc/meminfo");
    }
    char line[256];
    unsigned long long avail = 0, total = 0;
    bool have_avail = false, have_total = false;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            avail = kb * 1024ull;
            have_avail = true;
        } else if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
            total = kb * 1024ull;
            have_total = true;
        }
    }
    fclose(f);
    if (!have_avail || !have_total)
        return dmm_error_set(DMM_ERR_DRIVER,
                             "host driver: mem_info: /proc/meminfo lacks MemAvailable or MemTotal (kernel "
                             "older than 3.14?)");
    *free_bytes = avail;
    *total_bytes = total;
    return DMM_OK;
}

static dmm_status host_census(dmm_driver *d, dmm_driver_census *out) {
    host_driver *h = H(d);
    if (out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "host driver: census: the output struct is NULL");
    if (out->size < sizeof *out)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                             "host driver: census: the output struct's size is %u bytes; set .size = "
                             "sizeof(dmm_driver_census) (%zu)",
                             out->size, sizeof *out);
    dmm_lock_acquire(&h->lock);
    dmm_driver_census c = h->tally;
    dmm_lock_release(&h->lock);
    c.size = out->size;
    *out = c;
    return DMM_OK;
}

static void host_destroy(dmm_driver *d) {
    host_driver *h = H(d);
    /* everything should be gone; what is not is given back so the process does not leak */
    if (h->tally.reserved_bytes || h->tally.handles || h->tally.eager_bytes || h->streams.n || h->events.n)
        dmm_log(DMM_LOG_WARN,
                 "host driver destroyed while holding %llu reserved bytes, %llu handles, %llu mapped bytes, "
                 "%llu eager bytes, %zu streams, %zu events; giving them back",
                 (unsigned long long)h->tally.reserved_bytes, (unsigned long long)h->tally.handles,
                 (unsigned long long)h->tally.mapped_bytes, (unsigned long long)h->tally.eager_bytes,
                 h->streams.n, h->events.n);
    for (size_t i = 0; i < h->reservations.n; i++) munmap((void *)h->reservations.v[i].key, h->reservations.v[i].a);
    for (size_t i = 0; i < h->nhandles; i++)
        if (h->handles[i].fd >= 0) close(h->handles[i].fd);
    for (size_t i = 0; i < h->eager.n; i++) munmap((void *)h->eager.v[i].key, h->eager.v[i].a);
    for (size_t i = 0; i < h->streams.n; i++) free((void *)h->streams.v[i].key);
    for (size_t i = 0; i < h->events.n; i++) free((void *)h->events.v[i].key);
    free(h->reservations.v);
    free(h->mappings.v);
    free(h->eager.v);
    free(h->streams.v);
    free(h->events.v);
    free(h->handles);
    free(h->free_slots);
    dmm_lock_destroy(&h->lock);
    free(h);
}

/* Host memory for copies: ordinary memory (every copy of this driver runs on the CPU at once). */
static dmm_status host_host_alloc(dmm_driver *d, size_t bytes, void **out) {
    (void)d;
    if (out == NULL || bytes == 0)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "host driver host_alloc(%zu bytes): needs bytes > 0 and an "
                                                       "output pointer", bytes);
    *out = malloc(bytes);
    if (*out == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "host driver host_alloc: no host memory for %zu bytes", bytes);
    return DMM_OK;
}
static dmm_status host_host_free(dmm_driver *d, void *ptr) {
    (void)d;
    free(ptr);
    return DMM_OK;
}
/* Streams are synchronous: every event recorded has completed, so a wait orders nothing more. */
static dmm_status host_stream_wait_event(dmm_driver *d, dmm_stream waiter, dmm_event event) {
    (void)d;
    (void)waiter;
    if (event == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "host driver stream_wait_event: event is NULL");
    return DMM_OK;
}

/* Host work is synchronous: nothing queued is left to wait for. */
static dmm_status host_device_synchronize(dmm_driver *d) {
    (void)d;
    return DMM_OK;
}

static const dmm_driver_ops host_ops = {
    .size = sizeof(dmm_driver_ops),
    .name = "host",
    .granularity = host_granularity,
    .reserve = host_reserve,
    .unreserve = host_unreserve,
    .create = host_create,
    .release = host_release,
    .map = host_map,
    .unmap = host_unmap,
    .set_access = host_set_access,
    .alloc = host_alloc,
    .free = host_free,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_synchronize = host_event_synchronize,
    .copy = host_copy,
    .stream_synchronize = host_stream_synchronize,
    .mem_info = host_mem_info,
    .census = host_census,
    .destroy = host_destroy,
    .create_exportable = host_create, /* every memfd can be passed to another process */
    .export_handle = host_export,
    .import_handle = host_import,
    .host_alloc = host_host_alloc,
    .host_free = host_host_free,
    .stream_wait_event = host_stream_wait_event,
    .device_synchronize = host_device_synchronize,
};

dmm_status dmm_host_driver_create(const dmm_host_driver_config *cfg, dmm_driver **out) {
    if (out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_host_driver_create: the output pointer is NULL");
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    size_t gran = HOST_DEFAULT_GRANULARITY;
    if (cfg != NULL) {
        if (cfg->size < sizeof *cfg)
            return dmm_error_set(DMM_ERR_SHORT_STRUCT,
                                 "dmm_host_driver_create: the config's size is %u bytes; set .size = "
                                 "sizeof(dmm_host_driver_config) (%zu)",
                                 cfg->size, sizeof *cfg);
        if (cfg->granularity != 0) {
            if (!dmm_is_pow2(cfg->granularity) || cfg->granularity < page)
                return dmm_error_set(DMM_ERR_INVALID_ARGUMENT,
                                     "dmm_host_driver_create: granularity %zu is invalid: it must be a power of "
                                     "two and at least the page size (%zu); pass 0 for the default 2 MiB",
                                     cfg->granularity, page);
            gran = cfg->granularity;
        }
    }
    if (gran < page) gran = page;
    host_driver *h = calloc(1, sizeof *h);
    if (h == NULL)
        return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_host_driver_create: out of memory for the driver object");
    h->base.ops = &host_ops;
    h->base.device = (dmm_device_id){DMM_TIER_HOST, 0};
    h->granularity = gran;
    h->page = page;
    dmm_lock_init(&h->lock);
    *out = &h->base;
    return DMM_OK;
}
