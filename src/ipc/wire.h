/* SPDX-License-Identifier: Apache-2.0 */
/* src/ipc/wire.h — the holder's messages on the wire (wire.c): one message is one SOCK_SEQPACKET
 * record, a fixed header and a payload laid out field by field; descriptors ride beside it
 * (SCM_RIGHTS, sock.c). Never installed. The protocol in full: docs/ipc.md.
 *
 *   header (16 bytes, little-endian): magic u32 "DMMH" · version u16 (2) · type u16 · seq u32 · length u32
 *   HELLO   version u32
 *   CREATE  name · bytes u64 · flags u32 · access u32
 *   ATTACH  name · token[16] · access u32
 *   DROP    name · token[16]
 *   CENSUS  (empty)
 *   EXPORT  export                          (peer to peer: dmm_ipc_send_export)
 *   TAKEN   name · token[16]                (the creator has read the token of a named region it created)
 *   REPLY   status u32 · text (u16 length, bytes) · body kind u16 · body (none | export | census)
 *   name = u16 length (1 … DMM_IPC_NAME_MAX) + bytes of [A-Za-z0-9._/-];  export = nchunks u32 ·
 *   bytes u64 · granule u64 · tier u32 · index i32 · access u32 · token[16] · chunk bytes u64 × nchunks
 * A decoded message passed every check: exact length, known type, every field in range; nothing
 * about it is trusted beyond that.
 */
#ifndef DMM_IPC_WIRE_H
#define DMM_IPC_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dmm/ipc.h"
#include "dmm/share.h"

#define DMM_IPC_MAGIC 0x484d4d44u /* "DMMH" */
#define DMM_IPC_VERSION 2u /* 2: TAKEN, the census's trust counters */
#define DMM_IPC_HEADER 16u
#define DMM_IPC_MAX_MESSAGE 4096u /* a record longer than this is refused as oversized */
#define DMM_IPC_TEXT_MAX 400u

typedef enum dmm_ipc_type {
    DMM_IPC_HELLO = 1,
    DMM_IPC_CREATE = 2,
    DMM_IPC_ATTACH = 3,
    DMM_IPC_DROP = 4,
    DMM_IPC_CENSUS = 5,
    DMM_IPC_EXPORT = 6,
    DMM_IPC_TAKEN = 7,
    DMM_IPC_REPLY = 0x80,
} dmm_ipc_type;

typedef enum dmm_ipc_body { DMM_IPC_BODY_NONE = 0, DMM_IPC_BODY_EXPORT = 1, DMM_IPC_BODY_CENSUS = 2 } dmm_ipc_body;

typedef struct dmm_ipc_msg {
    uint16_t type; /* a dmm_ipc_type */
    uint32_t seq;
    uint32_t version;                          /* HELLO */
    char name[DMM_IPC_NAME_MAX + 1];           /* CREATE, ATTACH, DROP, TAKEN; NUL-terminated */
    uint64_t bytes;                            /* CREATE */
    uint32_t flags;                            /* CREATE: DMM_IPC_PRIVATE */
    uint32_t access;                           /* CREATE, ATTACH: a dmm_access */
    uint8_t token[DMM_EXPORT_TOKEN_BYTES];     /* ATTACH, DROP, TAKEN */
    uint32_t status;                           /* REPLY: a dmm_status */
    char text[DMM_IPC_TEXT_MAX + 1];           /* REPLY */
    uint16_t body;                             /* REPLY: a dmm_ipc_body; EXPORT carries an export */
    dmm_export ex;                             /* REPLY export body, EXPORT (fds all -1 here) */
    dmm_ipc_census census;                     /* REPLY census body */
} dmm_ipc_msg;

/* The census of protocol 1 ended at `errors`: a caller's struct of that size is filled that far. */
#define DMM_IPC_CENSUS_V1_SIZE (offsetof(dmm_ipc_census, errors) + sizeof(uint64_t))
/* Copies `from` into the caller's `to`, as far as to->size reaches (≥ DMM_IPC_CENSUS_V1_SIZE); to->size stays. */
void dmm__ipc_census_copy(dmm_ipc_census *to, const dmm_ipc_census *from);

/* Clears m (fds of its export -1) and sets its type. */
void dmm__ipc_msg_init(dmm_ipc_msg *m, dmm_ipc_type type);
/* Lays m out in buf (cap ≥ DMM_IPC_MAX_MESSAGE suffices); *len = bytes written. INVALID_ARGUMENT for
 * a message that would not decode (a bad name, too many chunks, too long). */
dmm_status dmm__ipc_encode(const dmm_ipc_msg *m, uint8_t *buf, size_t cap, size_t *len);
/* Reads one record of n bytes, checking every value: DMM_OK with *m filled, or INVALID_ARGUMENT with a
 * sentence naming the field and what was wrong (m is then meaningless). Never reads past n. */
dmm_status dmm__ipc_decode(const uint8_t *buf, size_t n, dmm_ipc_msg *m);
/* Whether `name` is a valid region name (1 … DMM_IPC_NAME_MAX bytes of [A-Za-z0-9._/-]). */
bool dmm__ipc_name_ok(const char *name, size_t len);

#endif /* DMM_IPC_WIRE_H */
