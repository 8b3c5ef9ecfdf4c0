/* dmm/ipc.h — exports over Unix sockets, and the holder: a process that keeps named regions of device
 * memory alive across the restarts and crashes of the processes that use them (docs/ipc.md; the
 * protocol, the lifetime rules and the threat model: docs/ipc.md).
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
 * Security: the socket is created mode 0600 in a directory the user owns that no one else may
 * write; the holder serves only peers of its own uid (SO_PEERCRED) and logs a refusal; attach and
 * drop need the region's 128-bit token; every message is checked value by value, and a malformed,
 * truncated, oversized or out-of-order one gets an error reply and changes nothing.
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
    uint64_t refused;         /* connections refused (another uid, too many) since start */
    uint64_t errors;          /* error replies sent since start */
} dmm_ipc_census;

/* ---- client ---- */
typedef struct dmm_ipc_client dmm_ipc_client;

/* Connects to the holder at `path` and says hello. */
DMM_API dmm_status dmm_ipc_connect(const char *path, dmm_ipc_client **out);
/* Closes the connection (the holder then drops this connection's private regions). NULL is ignored. */
DMM_API void dmm_ipc_disconnect(dmm_ipc_client *c);
/* Asks the holder to create region `name` of `bytes` (rounded up to its granule) with `flags`
 * (0 or DMM_IPC_PRIVATE): `out` receives read-write descriptors, the description and the region's
 * token (keep it: attach and drop need it). The holder's refusal (the name exists, over its limit, …)
 * comes back as its status and sentence. */
DMM_API dmm_status dmm_ipc_create(dmm_ipc_client *c, const char *name, uint64_t bytes, uint32_t flags,
                                  dmm_export *out);
/* Attaches region `name` with its token: `out` receives descriptors usable with at most `access`. */
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

typedef struct dmm_ipc_holder_config {
    uint32_t size;           /* sizeof(dmm_ipc_holder_config) */
    const char *socket_path; /* where to listen: its directory must be the user's own, not writable by others */
    uint64_t limit_bytes;    /* the most the regions may own together; 0 = no limit */
    dmm_driver *driver;      /* the memory's driver (not owned); NULL = a host driver of the holder's own */
} dmm_ipc_holder_config;

/* Creates the socket (mode 0600; a stale socket nobody listens on is replaced, a live one refused)
 * and the holder's arena and governor. */
DMM_API dmm_status dmm_ipc_holder_create(const dmm_ipc_holder_config *cfg, dmm_ipc_holder **out);
/* Serves until `stop_fd` (≥ 0) becomes readable or, with timeout_ms ≥ 0, that long passed with
 * nothing to do. A client's misbehaviour is answered and logged, never returned. */
DMM_API dmm_status dmm_ipc_holder_serve(dmm_ipc_holder *h, int stop_fd, int timeout_ms);
DMM_API dmm_status dmm_ipc_holder_census(dmm_ipc_holder *h, dmm_ipc_census *out);
/* Drops every region, closes every connection, removes the socket. */
DMM_API dmm_status dmm_ipc_holder_destroy(dmm_ipc_holder *h);

#ifdef __cplusplus
}
#endif
#endif /* DMM_IPC_H */
