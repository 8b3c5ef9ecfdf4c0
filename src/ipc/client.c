/* SPDX-License-Identifier: Apache-2.0 */
/* src/ipc/client.c — the holder's client (dmm/ipc.h): a connection, its hello, and one request and
 * its reply at a time, in sequence (seq = 1 for the hello, then +1 per request: the holder refuses
 * anything out of order).
 *
 * The client trusts the holder no more than the holder trusts it: a reply is decoded value by value
 * (sock.c, wire.c), must answer the request just sent (same seq, the expected body), and carries
 * exactly the descriptors its export names; anything else is refused and its descriptors closed.
 *
 * Every wait has a deadline (the config's reply deadline): the dial and the sends (SO_SNDTIMEO), and
 * each reply (poll). The holder is dialed only when it runs as this process's uid (sock.c). A holder
 * that refuses a newcomer (too many connections, no descriptor free) sends one reply with its
 * sentence and closes: a hello that cannot be sent then reads that reply, so the caller gets the
 * holder's reason, not a broken pipe.
 *
 * Invariant: a client's `fd` is its connection; `seq` is the last request's sequence number.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "ipc/sock.h"

struct dmm_ipc_client {
    int fd;               /* the connection */
    uint32_t seq;         /* the last request's sequence number */
    uint32_t deadline_ms; /* the longest wait for a send or a reply */
};

/* After a send failed: the holder's refusal, if it left one before closing (DMM_OK = none). */
static dmm_status refusal_left(dmm_ipc_client *c, const char *op) {
    uint8_t buf[DMM_IPC_MAX_MESSAGE];
    dmm_ipc_rx rx;
    dmm_ipc_msg r;
    if (dmm__ipc_recv(c->fd, buf, sizeof buf, true, &rx) != DMM_OK) return DMM_OK;
    dmm__ipc_close_fds(rx.fds, rx.nfds);
    if (rx.closed || rx.oversized || dmm__ipc_decode(buf, rx.len, &r) != DMM_OK || r.type != DMM_IPC_REPLY ||
        r.status == DMM_OK)
        return DMM_OK;
    return dmm_error_set((dmm_status)r.status, "%s: the holder refused: %s", op, r.text);
}

/* Sends m (seq set here) and waits for its reply; a holder's refusal comes back as its status with
 * its sentence. On DMM_OK, *reply holds the reply (and owns any descriptors). */
static dmm_status roundtrip(dmm_ipc_client *c, dmm_ipc_msg *m, dmm_ipc_body want, const char *op,
                            dmm_ipc_msg *reply) {
    m->seq = ++c->seq;
    dmm_status s = dmm__ipc_send(c->fd, m, NULL, 0);
    if (s != DMM_OK) {
        dmm_error_kept why = {0};
        dmm__error_keep(&why, s);
        dmm_status refused = refusal_left(c, op);
        if (refused != DMM_OK) return refused;
        return dmm__error_wrap(dmm__error_restore(&why), "%s", op);
    }
    s = dmm__ipc_recv_msg(c->fd, c->deadline_ms, reply, "the holder's reply");
    if (s != DMM_OK) return dmm__error_wrap(s, "%s", op);
    if (reply->type != DMM_IPC_REPLY || reply->seq != m->seq) {
        dmm_export_close(&reply->ex);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the holder answered with message type %u, seq %u, not the "
                                                       "reply to request %u", op, reply->type, reply->seq, m->seq);
    }
    if (reply->status != DMM_OK) {
        dmm_export_close(&reply->ex);
        return dmm_error_set((dmm_status)reply->status, "%s: the holder refused: %s", op, reply->text);
    }
    if (reply->body != want) {
        dmm_export_close(&reply->ex);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the holder's reply has body kind %u, not %u", op,
                             reply->body, (unsigned)want);
    }
    return DMM_OK;
}

dmm_status dmm_ipc_connect_with(const dmm_ipc_client_config *cfg, dmm_ipc_client **out) {
    if (cfg == NULL || out == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_ipc_connect: the config and the output must be non-NULL");
    if (cfg->size < sizeof *cfg)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "dmm_ipc_connect: the config's size is %u bytes; set .size = "
                                                   "sizeof(dmm_ipc_client_config) (%zu)", cfg->size, sizeof *cfg);
    dmm_ipc_client *c = calloc(1, sizeof *c);
    if (c == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_ipc_connect: no host memory for the client");
    c->deadline_ms = cfg->reply_deadline_ms ? cfg->reply_deadline_ms : DMM_IPC_REPLY_DEADLINE_MS;
    const char *path = cfg->socket_path;
    dmm_status s = dmm__ipc_dial(path, c->deadline_ms, &c->fd);
    if (s != DMM_OK) {
        free(c);
        return s;
    }
    dmm_ipc_msg m, r;
    dmm__ipc_msg_init(&m, DMM_IPC_HELLO);
    m.version = DMM_IPC_VERSION;
    s = roundtrip(c, &m, DMM_IPC_BODY_NONE, "dmm_ipc_connect: hello", &r);
    if (s != DMM_OK) {
        close(c->fd);
        free(c);
        return s;
    }
    *out = c;
    return DMM_OK;
}

dmm_status dmm_ipc_connect(const char *path, dmm_ipc_client **out) {
    dmm_ipc_client_config cfg = {sizeof cfg, path, 0};
    return dmm_ipc_connect_with(&cfg, out);
}

void dmm_ipc_disconnect(dmm_ipc_client *c) {
    if (c == NULL) return;
    close(c->fd);
    free(c);
}

int dmm_ipc_client_fd(const dmm_ipc_client *c) { return c != NULL ? c->fd : -1; }

static dmm_status name_arg(const char *name, const char *op) {
    if (name == NULL || !dmm__ipc_name_ok(name, strnlen(name, DMM_IPC_NAME_MAX + 1)))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: the region name %s%s%s must be 1 to %d bytes of "
                                                       "[A-Za-z0-9._/-]", op, name ? "'" : "", name ? name : "(NULL)",
                             name ? "'" : "", DMM_IPC_NAME_MAX);
    return DMM_OK;
}

static dmm_status export_reply(dmm_ipc_client *c, dmm_ipc_msg *m, const char *op, dmm_export *out) {
    dmm_ipc_msg r;
    dmm_status s = roundtrip(c, m, DMM_IPC_BODY_EXPORT, op, &r);
    if (s != DMM_OK) return s;
    if ((s = dmm_export_check(&r.ex, true)) != DMM_OK) {
        dmm_export_close(&r.ex);
        return dmm__error_wrap(s, "%s: the holder's export", op);
    }
    *out = r.ex;
    return DMM_OK;
}

dmm_status dmm_ipc_create(dmm_ipc_client *c, const char *name, uint64_t bytes, uint32_t flags, dmm_export *out) {
    static const char op[] = "dmm_ipc_create";
    if (c == NULL || out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: client and output must be non-NULL", op);
    dmm_export_init(out);
    dmm_status s = name_arg(name, op);
    if (s != DMM_OK) return s;
    if (bytes == 0 || (flags & ~(uint32_t)DMM_IPC_PRIVATE))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s of '%s': %llu bytes and flags %#x; the size must be non-zero "
                                                       "and the flags 0 or DMM_IPC_PRIVATE", op, name,
                             (unsigned long long)bytes, flags);
    dmm_ipc_msg m;
    dmm__ipc_msg_init(&m, DMM_IPC_CREATE);
    snprintf(m.name, sizeof m.name, "%s", name);
    m.bytes = bytes;
    m.flags = flags;
    m.access = DMM_ACCESS_READ_WRITE;
    s = export_reply(c, &m, op, out);
    if (s != DMM_OK || (flags & DMM_IPC_PRIVATE)) return s;
    /* the token is here: tell the holder, so that the region outlives this connection */
    dmm_ipc_msg t, r;
    dmm__ipc_msg_init(&t, DMM_IPC_TAKEN);
    snprintf(t.name, sizeof t.name, "%s", name);
    memcpy(t.token, out->token, sizeof t.token);
    s = roundtrip(c, &t, DMM_IPC_BODY_NONE, "dmm_ipc_create: taking the token", &r);
    if (s != DMM_OK) dmm_export_close(out); /* the region goes with this connection: its descriptors are of no use */
    return s;
}

dmm_status dmm_ipc_attach(dmm_ipc_client *c, const char *name, const uint8_t token[DMM_EXPORT_TOKEN_BYTES],
                          dmm_access access, dmm_export *out) {
    static const char op[] = "dmm_ipc_attach";
    if (c == NULL || out == NULL || token == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: client, token and output must be non-NULL", op);
    dmm_export_init(out);
    dmm_status s = name_arg(name, op);
    if (s != DMM_OK) return s;
    if (access != DMM_ACCESS_READ && access != DMM_ACCESS_READ_WRITE)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s of '%s': access %d is neither READ nor READ_WRITE", op, name,
                             (int)access);
    dmm_ipc_msg m;
    dmm__ipc_msg_init(&m, DMM_IPC_ATTACH);
    snprintf(m.name, sizeof m.name, "%s", name);
    memcpy(m.token, token, sizeof m.token);
    m.access = (uint32_t)access;
    return export_reply(c, &m, op, out);
}

dmm_status dmm_ipc_drop(dmm_ipc_client *c, const char *name, const uint8_t token[DMM_EXPORT_TOKEN_BYTES]) {
    static const char op[] = "dmm_ipc_drop";
    if (c == NULL || token == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: client and token must be non-NULL", op);
    dmm_status s = name_arg(name, op);
    if (s != DMM_OK) return s;
    dmm_ipc_msg m, r;
    dmm__ipc_msg_init(&m, DMM_IPC_DROP);
    snprintf(m.name, sizeof m.name, "%s", name);
    memcpy(m.token, token, sizeof m.token);
    return roundtrip(c, &m, DMM_IPC_BODY_NONE, op, &r);
}

dmm_status dmm_ipc_census_get(dmm_ipc_client *c, dmm_ipc_census *out) {
    static const char op[] = "dmm_ipc_census_get";
    if (c == NULL || out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "%s: client and output must be non-NULL", op);
    if (out->size < DMM_IPC_CENSUS_V1_SIZE)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "%s: the census's size is %u bytes; set .size = sizeof(dmm_ipc_census) "
                                                   "(%zu)", op, out->size, sizeof *out);
    dmm_ipc_msg m, r;
    dmm__ipc_msg_init(&m, DMM_IPC_CENSUS);
    dmm_status s = roundtrip(c, &m, DMM_IPC_BODY_CENSUS, op, &r);
    if (s != DMM_OK) return s;
    dmm__ipc_census_copy(out, &r.census);
    return DMM_OK;
}
