/* SPDX-License-Identifier: Apache-2.0 */
/* src/ipc/wire.c — the holder protocol's messages: laying a message out and reading one back,
 * value by value (wire.h has the layout). This is the parser every byte from a client goes through,
 * so it trusts nothing: every read is bounds-checked against the record's length, every field is
 * checked against its range, and a record is accepted only when its length is exactly what its
 * fields take. The fuzz harness tests/fuzz/fuzz_ipc.c feeds it hostile input.
 *
 * Invariant: dmm__ipc_decode(dmm__ipc_encode(m)) = m for every m encode accepts, and decode accepts
 * nothing encode could not have written.
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "ipc/wire.h"

/* ---- a cursor over a record ---- */
typedef struct wcur {
    uint8_t *w;       /* writing: the buffer */
    const uint8_t *r; /* reading: the record */
    size_t at, cap;
    bool bad;         /* a read or write went past the end */
} wcur;

static void put(wcur *c, const void *p, size_t n) {
    if (c->bad || n > c->cap - c->at) {
        c->bad = true;
        return;
    }
    memcpy(c->w + c->at, p, n);
    c->at += n;
}
static void put_u16(wcur *c, uint16_t v) { uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)}; put(c, b, 2); }
static void put_u32(wcur *c, uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(c, b, 4);
}
static void put_u64(wcur *c, uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(c, b, 8);
}
static bool get(wcur *c, void *p, size_t n) {
    if (c->bad || n > c->cap - c->at) {
        c->bad = true;
        memset(p, 0, n);
        return false;
    }
    memcpy(p, c->r + c->at, n);
    c->at += n;
    return true;
}
static uint16_t get_u16(wcur *c) {
    uint8_t b[2];
    get(c, b, 2);
    return (uint16_t)(b[0] | b[1] << 8);
}
static uint32_t get_u32(wcur *c) {
    uint8_t b[4];
    get(c, b, 4);
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint64_t get_u64(wcur *c) {
    uint8_t b[8];
    get(c, b, 8);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

bool dmm__ipc_name_ok(const char *name, size_t len) {
    if (len == 0 || len > DMM_IPC_NAME_MAX) return false;
    for (size_t i = 0; i < len; i++) {
        char ch = name[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                  ch == '_' || ch == '/' || ch == '-';
        if (!ok) return false;
    }
    return true;
}

void dmm__ipc_census_copy(dmm_ipc_census *to, const dmm_ipc_census *from) {
    uint32_t size = to->size;
    size_t n = size < sizeof *to ? size : sizeof *to;
    memcpy(to, from, n);
    to->size = size;
}

void dmm__ipc_msg_init(dmm_ipc_msg *m, dmm_ipc_type type) {
    memset(m, 0, sizeof *m);
    m->type = (uint16_t)type;
    dmm_export_init(&m->ex);
    m->census.size = (uint32_t)sizeof m->census;
}

/* ---- encode ---- */

static void put_name(wcur *c, const char *name) {
    size_t len = strnlen(name, DMM_IPC_NAME_MAX + 1);
    if (!dmm__ipc_name_ok(name, len)) {
        c->bad = true;
        return;
    }
    put_u16(c, (uint16_t)len);
    put(c, name, len);
}

static void put_export(wcur *c, const dmm_export *ex) {
    if (ex->nchunks == 0 || ex->nchunks > DMM_EXPORT_MAX_CHUNKS) {
        c->bad = true;
        return;
    }
    put_u32(c, ex->nchunks);
    put_u64(c, ex->bytes);
    put_u64(c, ex->granule);
    put_u32(c, (uint32_t)ex->device.tier);
    put_u32(c, (uint32_t)ex->device.index);
    put_u32(c, ex->access);
    put(c, ex->token, sizeof ex->token);
    for (uint32_t i = 0; i < ex->nchunks; i++) put_u64(c, ex->chunk_bytes[i]);
}

static void put_census(wcur *c, const dmm_ipc_census *k) {
    put_u64(c, k->regions);
    put_u64(c, k->private_regions);
    put_u64(c, k->region_bytes);
    put_u64(c, k->owned_bytes);
    put_u64(c, k->handles);
    put_u64(c, k->connections);
    put_u64(c, k->refused);
    put_u64(c, k->errors);
    put_u64(c, k->pending_regions);
    put_u64(c, k->hello_timeouts);
    put_u64(c, k->evicted);
    put_u64(c, k->wakeups);
}

dmm_status dmm__ipc_encode(const dmm_ipc_msg *m, uint8_t *buf, size_t cap, size_t *len) {
    wcur c = {buf, NULL, DMM_IPC_HEADER, cap < DMM_IPC_MAX_MESSAGE ? cap : DMM_IPC_MAX_MESSAGE, cap < DMM_IPC_HEADER};
    switch (m->type) {
    case DMM_IPC_HELLO: put_u32(&c, m->version); break;
    case DMM_IPC_CREATE:
        put_name(&c, m->name);
        put_u64(&c, m->bytes);
        put_u32(&c, m->flags);
        put_u32(&c, m->access);
        break;
    case DMM_IPC_ATTACH:
        put_name(&c, m->name);
        put(&c, m->token, sizeof m->token);
        put_u32(&c, m->access);
        break;
    case DMM_IPC_DROP:
    case DMM_IPC_TAKEN:
        put_name(&c, m->name);
        put(&c, m->token, sizeof m->token);
        break;
    case DMM_IPC_CENSUS: break;
    case DMM_IPC_EXPORT: put_export(&c, &m->ex); break;
    case DMM_IPC_REPLY: {
        size_t tl = strnlen(m->text, DMM_IPC_TEXT_MAX);
        put_u32(&c, m->status);
        put_u16(&c, (uint16_t)tl);
        put(&c, m->text, tl);
        put_u16(&c, m->body);
        if (m->body == DMM_IPC_BODY_EXPORT) put_export(&c, &m->ex);
        else if (m->body == DMM_IPC_BODY_CENSUS) put_census(&c, &m->census);
        else if (m->body != DMM_IPC_BODY_NONE) c.bad = true;
        break;
    }
    default: c.bad = true;
    }
    if (c.bad)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "ipc: a message of type %u could not be laid out (an invalid "
                                                       "name, chunk count or body, or longer than %u bytes)",
                             m->type, DMM_IPC_MAX_MESSAGE);
    size_t total = c.at;
    c.at = 0;
    put_u32(&c, DMM_IPC_MAGIC);
    put_u16(&c, DMM_IPC_VERSION);
    put_u16(&c, m->type);
    put_u32(&c, m->seq);
    put_u32(&c, (uint32_t)(total - DMM_IPC_HEADER));
    *len = total;
    return DMM_OK;
}

/* ---- decode ---- */

#define BAD(...) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "ipc: malformed message: " __VA_ARGS__)

static dmm_status get_name(wcur *c, dmm_ipc_msg *m) {
    uint16_t len = get_u16(c);
    if (c->bad) BAD("it ends before the region name's length");
    if (len == 0 || len > DMM_IPC_NAME_MAX) BAD("the region name has %u bytes; a name has 1 to %d", len, DMM_IPC_NAME_MAX);
    if (!get(c, m->name, len)) BAD("it ends inside the region name (%u bytes announced)", len);
    m->name[len] = '\0';
    if (!dmm__ipc_name_ok(m->name, len))
        BAD("the region name holds a byte outside [A-Za-z0-9._/-]");
    return DMM_OK;
}

static dmm_status get_export(wcur *c, dmm_export *ex) {
    dmm_export_init(ex);
    ex->nchunks = get_u32(c);
    if (c->bad) BAD("it ends before the export's chunk count");
    if (ex->nchunks == 0 || ex->nchunks > DMM_EXPORT_MAX_CHUNKS)
        BAD("the export names %u chunks; an export has 1 to %d", ex->nchunks, DMM_EXPORT_MAX_CHUNKS);
    ex->bytes = get_u64(c);
    ex->granule = get_u64(c);
    uint32_t tier = get_u32(c);
    uint32_t index = get_u32(c);
    ex->access = get_u32(c);
    get(c, ex->token, sizeof ex->token);
    for (uint32_t i = 0; i < ex->nchunks; i++) ex->chunk_bytes[i] = get_u64(c);
    if (c->bad) BAD("it ends inside the export's description");
    if (tier > DMM_TIER_DISK || index > INT32_MAX) BAD("the export's device (tier %u, index %u) is not a device", tier, index);
    ex->device.tier = (dmm_tier)tier;
    ex->device.index = (int32_t)index;
    dmm_status s = dmm_export_check(ex, false); /* sizes, sums, granule, access */
    return s == DMM_OK ? DMM_OK : dmm__error_wrap(s, "ipc: malformed message: its export description is wrong");
}

static dmm_status get_census(wcur *c, dmm_ipc_census *k) {
    k->regions = get_u64(c);
    k->private_regions = get_u64(c);
    k->region_bytes = get_u64(c);
    k->owned_bytes = get_u64(c);
    k->handles = get_u64(c);
    k->connections = get_u64(c);
    k->refused = get_u64(c);
    k->errors = get_u64(c);
    k->pending_regions = get_u64(c);
    k->hello_timeouts = get_u64(c);
    k->evicted = get_u64(c);
    k->wakeups = get_u64(c);
    if (c->bad) BAD("it ends inside the census");
    return DMM_OK;
}

static dmm_status check_access(uint32_t access) {
    if (access != DMM_ACCESS_READ && access != DMM_ACCESS_READ_WRITE)
        BAD("access %u is neither READ (1) nor READ_WRITE (3)", access);
    return DMM_OK;
}

dmm_status dmm__ipc_decode(const uint8_t *buf, size_t n, dmm_ipc_msg *m) {
    dmm__ipc_msg_init(m, 0);
    if (buf == NULL || n < DMM_IPC_HEADER) BAD("%zu bytes is shorter than the %u-byte header (truncated)", n, DMM_IPC_HEADER);
    if (n > DMM_IPC_MAX_MESSAGE) BAD("%zu bytes is longer than the largest message (%u bytes)", n, DMM_IPC_MAX_MESSAGE);
    wcur c = {NULL, buf, 0, n, false};
    uint32_t magic = get_u32(&c);
    uint16_t version = get_u16(&c);
    m->type = get_u16(&c);
    m->seq = get_u32(&c);
    uint32_t length = get_u32(&c);
    if (magic != DMM_IPC_MAGIC) BAD("the magic is %#x, not \"DMMH\" (%#x): not a dmm holder message", magic, DMM_IPC_MAGIC);
    if (version != DMM_IPC_VERSION) BAD("protocol version %u; this side speaks %u", version, DMM_IPC_VERSION);
    if (length != n - DMM_IPC_HEADER)
        BAD("the header announces %u payload bytes but the record has %zu (truncated or padded)", length,
            n - DMM_IPC_HEADER);
    dmm_status s = DMM_OK;
    switch (m->type) {
    case DMM_IPC_HELLO: m->version = get_u32(&c); break;
    case DMM_IPC_CREATE:
        if ((s = get_name(&c, m)) != DMM_OK) return s;
        m->bytes = get_u64(&c);
        m->flags = get_u32(&c);
        m->access = get_u32(&c);
        if (c.bad) break;
        if (m->bytes == 0) BAD("a region of 0 bytes was asked for");
        if (m->flags & ~(uint32_t)DMM_IPC_PRIVATE) BAD("unknown flags %#x (only DMM_IPC_PRIVATE, %#x, exists)", m->flags,
                                                      (unsigned)DMM_IPC_PRIVATE);
        if ((s = check_access(m->access)) != DMM_OK) return s;
        break;
    case DMM_IPC_ATTACH:
        if ((s = get_name(&c, m)) != DMM_OK) return s;
        get(&c, m->token, sizeof m->token);
        m->access = get_u32(&c);
        if (!c.bad && (s = check_access(m->access)) != DMM_OK) return s;
        break;
    case DMM_IPC_DROP:
    case DMM_IPC_TAKEN:
        if ((s = get_name(&c, m)) != DMM_OK) return s;
        get(&c, m->token, sizeof m->token);
        break;
    case DMM_IPC_CENSUS: break;
    case DMM_IPC_EXPORT:
        if ((s = get_export(&c, &m->ex)) != DMM_OK) return s;
        break;
    case DMM_IPC_REPLY: {
        m->status = get_u32(&c);
        uint16_t tl = get_u16(&c);
        if (c.bad) break;
        if (m->status >= DMM_STATUS_COUNT) BAD("the reply's status %u is not a dmm_status", m->status);
        if (tl > DMM_IPC_TEXT_MAX) BAD("the reply's text has %u bytes, more than %u", tl, DMM_IPC_TEXT_MAX);
        if (!get(&c, m->text, tl)) break;
        m->text[tl] = '\0';
        for (uint16_t i = 0; i < tl; i++)
            if ((unsigned char)m->text[i] < 0x20 || m->text[i] == 0x7f) BAD("the reply's text holds a control byte");
        m->body = get_u16(&c);
        if (c.bad) break;
        if (m->body == DMM_IPC_BODY_EXPORT) s = get_export(&c, &m->ex);
        else if (m->body == DMM_IPC_BODY_CENSUS) s = get_census(&c, &m->census);
        else if (m->body != DMM_IPC_BODY_NONE) BAD("the reply's body kind %u is unknown", m->body);
        if (s != DMM_OK) return s;
        break;
    }
    default: BAD("message type %u is unknown", m->type);
    }
    if (c.bad) BAD("it ends before its last field (type %u, %zu bytes: truncated)", m->type, n);
    if (c.at != n) BAD("%zu bytes follow its last field (type %u)", n - c.at, m->type);
    return DMM_OK;
}
