/* src/ipc/sock.h — Unix sockets for the holder protocol (sock.c): listening with the right
 * permissions, dialing, one message out or in with its descriptors, the peer's credentials. Never
 * installed. */
#ifndef DMM_IPC_SOCK_H
#define DMM_IPC_SOCK_H

#include "ipc/wire.h"

/* One received record. */
typedef struct dmm_ipc_rx {
    size_t len;                        /* bytes of the record (0 with closed) */
    bool closed;                       /* the peer closed the connection */
    bool oversized;                    /* the record was longer than the buffer (MSG_TRUNC) */
    bool fds_cut;                      /* more descriptors came than fit (MSG_CTRUNC): the rest were dropped */
    size_t nfds;
    int fds[DMM_EXPORT_MAX_CHUNKS];    /* received descriptors (close-on-exec), owned by the receiver */
} dmm_ipc_rx;

/* Creates a listening SOCK_SEQPACKET socket at `path` (mode 0600) after checking that its directory
 * belongs to this user and no one else may write it; a stale socket there (nobody listens) is
 * replaced, anything else is refused. */
dmm_status dmm__ipc_listen(const char *path, int *fd);
/* Connects to `path`. */
dmm_status dmm__ipc_dial(const char *path, int *fd);
/* Encodes m and sends it with `fds` (n ≤ DMM_EXPORT_MAX_CHUNKS) as one record. */
dmm_status dmm__ipc_send(int sock, const dmm_ipc_msg *m, const int *fds, size_t n);
/* Receives one record into buf (cap bytes); `nonblocking`: DMM_ERR_BUSY when none is waiting. */
dmm_status dmm__ipc_recv(int sock, uint8_t *buf, size_t cap, bool nonblocking, dmm_ipc_rx *rx);
/* Receives and decodes one message (blocking) for a side that trusts its peer no more than the
 * holder trusts a client: the record must decode, and the descriptors that came with it must be
 * exactly those its export names (m->ex.fds then owns them); anything else closes them all and is
 * refused with a sentence. `what` names the expected message in sentences. */
dmm_status dmm__ipc_recv_msg(int sock, dmm_ipc_msg *m, const char *what);
/* The peer's uid and pid as the kernel recorded them at connect time (SO_PEERCRED). */
dmm_status dmm__ipc_peer(int sock, uint32_t *uid, int32_t *pid);
/* Closes n descriptors (ignoring -1) and sets them to -1. */
void dmm__ipc_close_fds(int *fds, size_t n);

#endif /* DMM_IPC_SOCK_H */
