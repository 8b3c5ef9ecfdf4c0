/* SPDX-License-Identifier: Apache-2.0 */
/* dmm/ipc.h — exports over Unix sockets, and the holder: a process that keeps named regions of device
 * memory alive across the restarts and crashes of the processes that use them (docs/ipc.md: the
 * protocol and the lifetime rules; docs/security.md: the threat model).
 *
 * Peer to peer: dmm_ipc_send_export / dmm_ipc_recv_export pass one export (dmm/share.h) over a
 * connected SOCK_SEQPACKET Unix socket, its descriptors as SCM_RIGHTS; the receiver checks every
 * value before it keeps anything.
 *
 * The holder (`dmm hold --socket PATH [--limit BYTES]` runs one; dmm_ipc_holder_* embeds one): owns
 * the regions in its own exportable arena, charged to its own governor (OWNED once, under --limit).
 * A client connects, says hello, and asks it to create a region by name (it gets descriptors and
 * the region's token back), to attach an existing region (name + token: descriptors, read-only
 * unless asked), to drop one (name + token), or for its census. The client maps what it gets with
 * dmm_import into its own arena (charging MAPPED only) and closes the descriptors.
 *
 * Lifetime: a named region lives until it is dropped by name, whatever happens to the clients; a
 * region created with DMM_IPC_PRIVATE is dropped when the connection that created it closes (a
 * crash included). Dropping a region releases the holder's reference; a client that still maps it
 * keeps the physical memory alive until it releases its import (the holder never unmaps anyone).
 *
 * Security (docs/security.md has the threat model): the holder serves only peers of its own uid
 * (SO_PEERCRED) and a client talks only to a holder of its own uid (SO_PEERCRED again, refused with a
 * sentence naming both uids). The socket path runs through no symbolic link, its folder is the
 * user's own and writable by no one else, its ancestors writable by others only with the sticky bit;
 * the socket is made mode 0600 without touching the process's umask, and removed at the end only if
 * the file at the path is still the one this holder bound. Attach and drop need the region's 128-bit
 * token; every message is checked value by value, and a malformed, truncated, oversized or
 * out-of-order one gets an error reply and changes nothing. A host region published read-only is
 * sealed by the kernel (memfd seals: no new writable mapping, no write, no resize); a region never
 * changes size. Every read has a deadline (the holder's hello deadline; the client's reply deadline);
 * connections are bounded per uid and in total, and a connection that has not said hello yields its
 * slot to a newcomer; a named region belongs to the connection that created it until that client
 * says it has taken the token (dmm_ipc_create does), and goes with the connection before that; a
 * full descriptor table is answered with a refusal, never with a spinning loop.
 *
 * Thread contract: a client or a holder has one owner (one thread at a time); different ones are
 * independent. The library never prints: the holder's refusals and errors go to the log callback
 * (dmm_set_log_callback), which the dmm tool prints.
 */
#ifndef DMM_IPC_H
#define DMM_IPC_H

#include "dmm/driver.h"
#include "dmm/share.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DMM_IPC_NAME_MAX 127 /* a region's name: 1 … 127 bytes of [A-Za-z0-9._/-] */
#define DMM_IPC_PRIVATE 1u   /* create flag: dropped when the creating connection closes */

/* Sends `ex` (description and descriptors; the caller keeps its descriptors) over the connected
 * SOCK_SEQPACKET socket `sock`. */
DMM_API dmm_status dmm_ipc_send_export(int sock, const dmm_export *ex);
/* Receives one export from `sock` (blocking): `out` is initialised, filled only after every value was
 * checked, and owns the received descriptors (dmm_export_close). Anything malformed is refused with a
 * sentence, its descriptors closed. */
DMM_API dmm_status dmm_ipc_recv_export(int sock, dmm_export *out);

/* What a holder holds (dmm_ipc_census, dmm_ipc_holder_census). */
typedef struct dmm_ipc_census {
    uint32_t size;            /* sizeof(dmm_ipc_census), set by the caller */
    uint64_t regions;         /* live regions, named and private */
    uint64_t private_regions; /* of them: those that die with their connection */
    uint64_t region_bytes;    /* Σ their bytes */
    uint64_t owned_bytes;     /* the holder arena's owned bytes (= region_bytes: nothing else is held) */
    uint64_t handles;         /* physical handles the holder's driver holds (its census) */
    uint64_t connections;     /* clients connected now */
    uint64_t refused;         /* connections refused (another uid, too many, no descriptor) since start */
    uint64_t errors;          /* error replies sent since start */
    /* since protocol 2 (a census of a smaller .size, down to `errors`, is filled up to its size) */
    uint64_t pending_regions; /* named regions whose creator has not yet taken the token: they go with its connection */
    uint64_t hello_timeouts;  /* connections closed because no hello came within the hello deadline */
    uint64_t evicted;         /* connections without a hello closed early to make room for a newcomer */
    uint64_t wakeups;         /* times the holder's loop woke up (poll returned) since start */
} dmm_ipc_census;

/* ---- client ---- */
typedef struct dmm_ipc_client dmm_ipc_client;

#define DMM_IPC_REPLY_DEADLINE_MS 30000u /* the client's default wait for a connection or a reply */

typedef struct dmm_ipc_client_config {
    uint32_t size;              /* sizeof(dmm_ipc_client_config) */
    const char *socket_path;    /* the holder's socket */
    uint32_t reply_deadline_ms; /* the longest wait for the connection, a send, or a reply; 0 = DMM_IPC_REPLY_DEADLINE_MS */
} dmm_ipc_client_config;

/* Connects to the holder at cfg->socket_path, checks that it runs as this process's effective uid
 * (SO_PEERCRED; another uid is refused with a sentence naming both, nothing sent), and says hello.
 * Every later wait of this client (a send, a reply) ends at the reply deadline with DMM_ERR_BUSY and
 * a sentence; the connection is then unusable (disconnect it). */
DMM_API dmm_status dmm_ipc_connect_with(const dmm_ipc_client_config *cfg, dmm_ipc_client **out);
/* dmm_ipc_connect_with with the defaults. */
DMM_API dmm_status dmm_ipc_connect(const char *path, dmm_ipc_client **out);
/* Closes the connection (the holder then drops this connection's private regions). NULL is ignored. */
DMM_API void dmm_ipc_disconnect(dmm_ipc_client *c);
/* Asks the holder to create region `name` of `bytes` (rounded up to its granule) with `flags`
 * (0 or DMM_IPC_PRIVATE): `out` receives read-write descriptors, the description and the region's
 * token (keep it: attach and drop need it). A named region is the connection's until the holder has
 * heard that the token arrived (a TAKEN message, sent here before returning): a client that dies
 * before that leaves nothing behind. Map what you create before you give its token to a read-only
 * attacher: once published read-only, a host region accepts no new writable mapping. The holder's
 * refusal (the name exists, over its limit, …) comes back as its status and sentence. */
DMM_API dmm_status dmm_ipc_create(dmm_ipc_client *c, const char *name, uint64_t bytes, uint32_t flags,
                                  dmm_export *out);
/* Attaches region `name` with its token: `out` receives descriptors usable with at most `access`.
 * The first read-only attach publishes the region read-only: a host region is then sealed (no new
 * writable mapping, no write, no resize: the kernel enforces it on every descriptor, a reopened one
 * included; mappings made before keep writing), and later read-write attaches are refused with a
 * sentence. Over CUDA the shareable handle carries no access rights: read-only is the importer's
 * own cuMemSetAccess, advisory (docs/security.md). */
DMM_API dmm_status dmm_ipc_attach(dmm_ipc_client *c, const char *name, const uint8_t token[DMM_EXPORT_TOKEN_BYTES],
                                  dmm_access access, dmm_export *out);
/* Drops region `name` (with its token): the holder releases its reference. */
DMM_API dmm_status dmm_ipc_drop(dmm_ipc_client *c, const char *name, const uint8_t token[DMM_EXPORT_TOKEN_BYTES]);
/* The holder's census. */
DMM_API dmm_status dmm_ipc_census_get(dmm_ipc_client *c, dmm_ipc_census *out);
/* The connection's socket (for poll, and for tests that speak the protocol themselves). */
DMM_API int dmm_ipc_client_fd(const dmm_ipc_client *c);

/* ---- holder ---- */
typedef struct dmm_ipc_holder dmm_ipc_holder;

#define DMM_IPC_HELLO_DEADLINE_MS 3000u  /* a connection that has not said hello by then is closed */
#define DMM_IPC_MAX_CONNECTIONS 256u     /* connections served at once, all uids together */
#define DMM_IPC_MAX_CONNECTIONS_PER_UID 128u

typedef struct dmm_ipc_holder_config {
    uint32_t size;           /* sizeof(dmm_ipc_holder_config) */
    const char *socket_path; /* where to listen: no symbolic link on the way; its folder the user's own, not writable by others */
    uint64_t limit_bytes;    /* the most the regions may own together; 0 = no limit */
    dmm_driver *driver;      /* the memory's driver (not owned); NULL = a host driver of the holder's own */
    /* since 0.3 (a config of the older size, ending at `driver`, gets the defaults) */
    uint32_t hello_deadline_ms;       /* 0 = DMM_IPC_HELLO_DEADLINE_MS; at most 600000 */
    uint32_t max_connections;         /* 0 = DMM_IPC_MAX_CONNECTIONS; at most 65536 */
    uint32_t max_connections_per_uid; /* 0 = DMM_IPC_MAX_CONNECTIONS_PER_UID (or max_connections, if smaller) */
} dmm_ipc_holder_config;

/* Creates the socket (mode 0600, never through the process's umask; a stale socket nobody listens on
 * is replaced, a live one refused, and so is one whose listener does not accept) and the holder's
 * arena and governor. */
DMM_API dmm_status dmm_ipc_holder_create(const dmm_ipc_holder_config *cfg, dmm_ipc_holder **out);
/* Serves until `stop_fd` (≥ 0) becomes readable or, with timeout_ms ≥ 0, that long passed with
 * nothing to do. A client's misbehaviour is answered and logged, never returned. The loop wakes only
 * for a descriptor or for the nearest hello deadline (and, while its descriptor table is full and no
 * reserve is left, once a second to retry): an idle holder without pending connections sleeps. */
DMM_API dmm_status dmm_ipc_holder_serve(dmm_ipc_holder *h, int stop_fd, int timeout_ms);
DMM_API dmm_status dmm_ipc_holder_census(dmm_ipc_holder *h, dmm_ipc_census *out);
/* Drops every region, closes every connection, removes the socket if the file at its path is still
 * the one this holder bound (another holder's socket there is left alone). */
DMM_API dmm_status dmm_ipc_holder_destroy(dmm_ipc_holder *h);

#ifdef __cplusplus
}
#endif
#endif /* DMM_IPC_H */
