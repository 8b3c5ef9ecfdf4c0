/* SPDX-License-Identifier: Apache-2.0 */
/* src/ipc/sock.h — Unix sockets for the holder protocol: the socket file (listen.c: where it may be
 * made, with which mode, and when it may be removed) and the messages (sock.c: dialing with a
 * deadline, one message out or in with its descriptors, the peer's credentials). Never installed. */
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

/* A listening socket and the file it made. */
typedef struct dmm_ipc_listener {
    int fd;                /* the listening socket (non-blocking); -1: none */
    int folder_fd;         /* the socket's folder, held open (O_PATH): bound, inspected and removed through it */
    char name[108];        /* the socket's file name in that folder */
    uint64_t dev, ino;     /* the file this listener bound */
} dmm_ipc_listener;

/* Creates a listening SOCK_SEQPACKET socket at `path` (mode 0600, without the umask) after checking
 * the path (no symbolic link; the folder ours and writable by no one else; ancestors root's or ours,
 * writable by others only with the sticky bit); a stale socket there (nobody listens) is replaced,
 * anything else is refused, never waited for. */
dmm_status dmm__ipc_listen(const char *path, dmm_ipc_listener *out);
/* Whether the file at the listener's path is still the one it bound. */
bool dmm__ipc_still_ours(const dmm_ipc_listener *l);
/* Removes the socket file if it is still the one bound, then closes the sockets (-1 afterwards). */
void dmm__ipc_unlisten(dmm_ipc_listener *l);
/* Connects to `path` within deadline_ms (> 0; a holder whose queue stays full answers DMM_ERR_BUSY),
 * and checks that the listener runs as this process's effective uid (else INVALID_ARGUMENT with a
 * sentence naming both uids). Sends on the socket then also wait at most deadline_ms. */
dmm_status dmm__ipc_dial(const char *path, uint32_t deadline_ms, int *fd);
/* Encodes m and sends it with `fds` (n ≤ DMM_EXPORT_MAX_CHUNKS) as one record. */
dmm_status dmm__ipc_send(int sock, const dmm_ipc_msg *m, const int *fds, size_t n);
/* Receives one record into buf (cap bytes); `nonblocking`: DMM_ERR_BUSY when none is waiting. */
dmm_status dmm__ipc_recv(int sock, uint8_t *buf, size_t cap, bool nonblocking, dmm_ipc_rx *rx);
/* Receives and decodes one message (waiting at most deadline_ms; 0 = no deadline) for a side that trusts its peer no more than the
 * holder trusts a client: the record must decode, and the descriptors that came with it must be
 * exactly those its export names (m->ex.fds then owns them); anything else closes them all and is
 * refused with a sentence. `what` names the expected message in sentences. */
dmm_status dmm__ipc_recv_msg(int sock, uint32_t deadline_ms, dmm_ipc_msg *m, const char *what);
/* The peer's uid and pid as the kernel recorded them at connect time (SO_PEERCRED). */
dmm_status dmm__ipc_peer(int sock, uint32_t *uid, int32_t *pid);
/* Closes n descriptors (ignoring -1) and sets them to -1. */
void dmm__ipc_close_fds(int *fds, size_t n);

#endif /* DMM_IPC_SOCK_H */
