/* src/ipc/holder_types.h — the holder's data (holder.c: sockets, connections, the loop; requests.c:
 * the protocol per connection and the region table). Never installed.
 *
 * Invariants (between two messages):
 *   every region's allocation is live in `arena`, committed whole and exported read-write at least once;
 *   region names are distinct; a region with conn ≠ 0 is private to the live connection with that id;
 *   census.owned_bytes (arena stats) = Σ region allocation bytes (nothing else is held: exported
 *   handles are never cached);
 *   a connection's seq = the seq of the last request it sent that was answered (0 before its hello).
 */
#ifndef DMM_IPC_HOLDER_TYPES_H
#define DMM_IPC_HOLDER_TYPES_H

#include "dmm/governor.h"
#include "dmm/ipc.h"
#include "ipc/sock.h"

#define DMM_IPC_MAX_CONNS 128   /* connections served at once; more are refused (and logged) */
#define DMM_IPC_MAX_REGIONS 4096

typedef struct ipc_region {
    char name[DMM_IPC_NAME_MAX + 1];
    uint8_t token[DMM_EXPORT_TOKEN_BYTES]; /* from the first export (getrandom) */
    dmm_allocation alloc;                  /* in the holder's arena */
    uint64_t conn;                         /* the creating connection's id for a private region, else 0 */
} ipc_region;

typedef struct ipc_conn {
    int fd;
    uint64_t id;  /* from the holder's counter, never 0 */
    int32_t pid;  /* the peer's, for log lines */
    bool hello;   /* said hello */
    uint32_t seq; /* last answered request */
} ipc_conn;

struct dmm_ipc_holder {
    dmm_driver *drv;
    bool own_drv;
    dmm_governor *gov;
    dmm_holder *gh;
    dmm_lease_id lease;
    dmm_mechanism *arena;
    uint64_t gran;
    int listen_fd;
    char path[108];
    uint32_t uid; /* the only uid served: the holder's own */
    ipc_conn conns[DMM_IPC_MAX_CONNS];
    size_t nconns;
    uint64_t next_conn;
    ipc_region *regions;
    size_t nregions, capregions;
    uint64_t refused, errors;
};

/* Answers one received record of connection c: fills *reply and the descriptors to send with it
 * (*nfds, the holder's own: the caller closes them after sending). Closes every descriptor that came
 * with the record. Never fails: a bad record gets an error reply and changes nothing. */
void dmm__holder_handle(dmm_ipc_holder *h, ipc_conn *c, const uint8_t *buf, dmm_ipc_rx *rx, dmm_ipc_msg *reply,
                        int *fds, size_t *nfds);
/* Drops the private regions of connection `id` (it closed). */
void dmm__holder_conn_gone(dmm_ipc_holder *h, uint64_t id);
/* Drops every region (destroy). DMM_OK, or the first release that was not COMPLETE. */
dmm_status dmm__holder_drop_all(dmm_ipc_holder *h);
/* Fills the census. */
void dmm__holder_census(dmm_ipc_holder *h, dmm_ipc_census *out);

#endif /* DMM_IPC_HOLDER_TYPES_H */
