/* src/ipc/client.c — the holder's client (dmm/ipc.h): a connection, its hello, and one request and
 * its reply at a time, in sequence (seq = 1 for the hello, then +1 per request: the holder refuses
 * anything out of order).
 *
 * The client trusts the holder no more than the holder trusts it: a reply is decoded value by value
 * (sock.c, wire.c), must answer the request just sent (same seq, the expected body), and carries
 * exactly the descriptors its export names; anything else is refused and its descriptors closed.
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
    int fd;       /* the connection */
    uint32_t seq; /* the last request's sequence number */
};

/* Sends m (seq set here) and waits for its reply; a holder's refusal comes back as its status with
 * its sentence. On DMM_OK, *reply holds the reply (and owns any descriptors). */
static dmm_status roundtrip(dmm_ipc_client *c, dmm_ipc_msg *m, dmm_ipc_body want, const char *op,
                            dmm_ipc_msg *reply) {
    m->seq = ++c->seq;
    dmm_status s = dmm__ipc_send(c->fd, m, NULL, 0);
    if (s != DMM_OK) return dmm__error_wrap(s, "%s", op);
    s = dmm__ipc_recv_msg(c->fd, reply, "the holder's reply");
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

dmm_status dmm_ipc_connect(const char *path, dmm_ipc_client **out) {
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_ipc_connect: the output is NULL");
    dmm_ipc_client *c = calloc(1, sizeof *c);
    if (c == NULL) return dmm_error_set(DMM_ERR_OUT_OF_MEMORY, "dmm_ipc_connect: no host memory for the client");
    dmm_status s = dmm__ipc_dial(path, &c->fd);
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
    return export_reply(c, &m, op, out);
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
    if (out->size < sizeof *out)
        return dmm_error_set(DMM_ERR_SHORT_STRUCT, "%s: the census's size is %u bytes; set .size = sizeof(dmm_ipc_census) "
                                                   "(%zu)", op, out->size, sizeof *out);
    dmm_ipc_msg m, r;
    dmm__ipc_msg_init(&m, DMM_IPC_CENSUS);
    dmm_status s = roundtrip(c, &m, DMM_IPC_BODY_CENSUS, op, &r);
    if (s != DMM_OK) return s;
    r.census.size = out->size;
    *out = r.census;
    return DMM_OK;
}
