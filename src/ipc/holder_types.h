/* SPDX-License-Identifier: Apache-2.0 */
/* src/ipc/holder_types.h — the holder's data (holder.c: its life and its loop; connections.c: who
 * gets a connection and for how long; requests.c: the protocol per connection and the region table).
 * Never installed.
 *
 * Invariants (between two messages):
 *   every region's allocation is live in `arena`, committed whole and exported read-write at least once;
 *   region names are distinct; a region with conn ≠ 0 is private to the live connection with that id;
 *   a region with pending ≠ 0 is named but still belongs to the live connection with that id (its
 *   creator has not said it took the token); conn ≠ 0 ⇒ pending = 0;
 *   a host region with read_only is sealed (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE |
 *   F_SEAL_SEAL); every host region is sealed against resizing (F_SEAL_SHRINK | F_SEAL_GROW);
 *   census.owned_bytes (arena stats) = Σ region allocation bytes (nothing else is held: exported
 *   handles are never cached);
 *   nconns ≤ max_conns; for every uid, #connections of it ≤ max_per_uid;
 *   a connection without hello has hello_by_ns > the time the loop last looked (expired ones are closed);
 *   a connection's seq = the seq of the last request it sent that was answered (0 before its hello).
 */
#ifndef DMM_IPC_HOLDER_TYPES_H
#define DMM_IPC_HOLDER_TYPES_H

#include <poll.h>

#include "dmm/governor.h"
#include "dmm/ipc.h"
#include "ipc/sock.h"

#define DMM_IPC_MAX_REGIONS 4096
#define DMM_IPC_ACCEPTS_PER_WAKE 64               /* then the loop serves the others before accepting more */
#define DMM_IPC_PAUSE_NS ((uint64_t)1000000000u)  /* listening paused this long when no descriptor is left */

typedef struct ipc_region {
    char name[DMM_IPC_NAME_MAX + 1];
    uint8_t token[DMM_EXPORT_TOKEN_BYTES]; /* from the first export (getrandom) */
    dmm_allocation alloc;                  /* in the holder's arena */
    uint64_t conn;                         /* the creating connection's id for a private region, else 0 */
    uint64_t pending;                      /* named, token not yet taken: the creating connection's id; else 0 */
    bool read_only;                        /* published read-only: read-write attaches are refused from then on */
} ipc_region;

typedef struct ipc_conn {
    int fd;
    uint64_t id;          /* from the holder's counter, never 0 */
    int32_t pid;          /* the peer's, for log lines */
    uint32_t uid;         /* the peer's (SO_PEERCRED) */
    bool hello;           /* said hello */
    uint32_t seq;         /* last answered request */
    uint64_t hello_by_ns; /* monotonic: closed then unless it said hello */
} ipc_conn;

struct dmm_ipc_holder {
    dmm_driver *drv;
    bool own_drv;
    dmm_governor *gov;
    dmm_holder *gh;
    dmm_lease_id lease;
    dmm_mechanism *arena;
    uint64_t gran;
    dmm_ipc_listener listener;
    char path[108];
    uint32_t uid;                /* the only uid served: the holder's own */
    uint64_t hello_deadline_ns;  /* a connection without hello is closed this long after it came */
    uint32_t max_conns, max_per_uid;
    ipc_conn *conns;             /* max_conns slots */
    size_t nconns;
    struct pollfd *polls;        /* max_conns + 2 */
    int reserve_fd;              /* /dev/null, given up to answer a newcomer when the descriptor table is full; -1: none */
    uint64_t paused_until_ns;    /* listening paused (no descriptor, no reserve) until then; 0: listening */
    uint64_t next_conn;
    ipc_region *regions;
    size_t nregions, capregions;
    uint64_t refused, errors, hello_timeouts, evicted, wakeups;
};

/* ---- connections.c ---- */
/* Accepts what waits on the listening socket (at most DMM_IPC_ACCEPTS_PER_WAKE), admitting or refusing each. */
void dmm__holder_accept(dmm_ipc_holder *h, uint64_t now_ns);
/* Admits connection fd of peer (uid, pid) under the limits, or refuses it (a reply with the reason, then
 * closed); at a limit a connection that has not said hello yields its slot (the oldest). Takes fd. */
void dmm__holder_admit(dmm_ipc_holder *h, int fd, uint32_t uid, int32_t pid, uint64_t now_ns);
/* Closes connection i (the last one moves into its slot) and drops what was its own. */
void dmm__holder_conn_close(dmm_ipc_holder *h, size_t i);
/* Closes the connections whose hello deadline has passed; returns the nearest deadline still ahead
 * (0: none). */
uint64_t dmm__holder_expire(dmm_ipc_holder *h, uint64_t now_ns);

/* ---- requests.c ---- */
/* Answers one received record of connection c: fills *reply and the descriptors to send with it
 * (*nfds, the holder's own: the caller closes them after sending). Closes every descriptor that came
 * with the record. Never fails: a bad record gets an error reply and changes nothing. */
void dmm__holder_handle(dmm_ipc_holder *h, ipc_conn *c, const uint8_t *buf, dmm_ipc_rx *rx, dmm_ipc_msg *reply,
                        int *fds, size_t *nfds);
/* Drops the regions that were connection `id`'s own: its private ones and its named ones whose token it
 * never took (it closed). */
void dmm__holder_conn_gone(dmm_ipc_holder *h, uint64_t id);
/* Drops every region (destroy). DMM_OK, or the first release that was not COMPLETE. */
dmm_status dmm__holder_drop_all(dmm_ipc_holder *h);
/* Fills the census. */
void dmm__holder_census(dmm_ipc_holder *h, dmm_ipc_census *out);

#endif /* DMM_IPC_HOLDER_TYPES_H */
