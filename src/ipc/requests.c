/* SPDX-License-Identifier: Apache-2.0 */
/* src/ipc/requests.c — the holder's side of the protocol: per connection, the order of messages
 * (hello first, then requests numbered one after another), and the region table the requests act
 * on (create, taken, attach, drop, census).
 *
 * Every record a client sends is untrusted: it is decoded value by value (wire.c), checked against
 * the connection's state, and only then acted on; a request is refused before anything changes
 * (a name that exists or does not, a wrong token, a limit, a malformed or out-of-order message), and
 * the refusal is the reply's status and sentence. Descriptors a client sends are closed unread.
 *
 * Tokens are compared in constant time. A region's memory is an allocation of the holder's
 * exportable arena, committed whole (charged OWNED once to the holder's governor, under --limit);
 * create and attach hand out fresh descriptors (read-write for create, the asked access for attach);
 * drop releases the holder's allocation: importers that still map the memory keep it alive (the
 * outcome's exported_bytes), the holder never unmaps anyone else's mapping.
 *
 * Ownership until the token arrives: a named region is created pending, the creating connection's
 * own, and goes with that connection, until the client says it has the token (TAKEN, which the
 * client library sends as soon as it has read the create's reply; naming the token proves the reply
 * was read, since nothing else carries it). A client that never reads its replies thus leaves
 * nothing behind when it goes.
 *
 * Seals (host memory, memfds): every region is sealed against resizing when it is created
 * (F_SEAL_SHRINK | F_SEAL_GROW: no attacher can truncate it under the others). The first read-only
 * attach publishes the region read-only: it is sealed with F_SEAL_FUTURE_WRITE (no new writable
 * mapping, no write(), whatever descriptor is used, one reopened through /proc included) and
 * F_SEAL_SEAL (the seals are final), and from then on a read-write attach is refused with a sentence.
 * Mappings made before the publication keep writing: read-only means "this attacher cannot write",
 * not "the bytes are frozen". Over CUDA nothing can be sealed (the handle carries no access rights):
 * the same rule is kept, advisory.
 *
 * Invariants: holder_types.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "ipc/holder_types.h"

/* A refusal's sentence before it is fitted to the reply (it may carry the library's whole sentence). */
#define REPLY_WHY_MAX 1024u

/* Fits `what` into the reply's text field: whole when it fits, else cut after the last clause that
 * fits (at ". ", "; ", ": " or ", ", or a word when none is near) and marked as cut, never
 * mid-word; the holder's log has it whole. */
static void fit_text(char *out, size_t cap, const char *what) {
    static const char mark[] = " [...] (cut; the holder's log has the whole sentence)";
    size_t n = strlen(what);
    if (n < cap) {
        memcpy(out, what, n + 1);
        return;
    }
    size_t room = cap - sizeof mark, cut = 0; /* room for the text before the mark */
    for (size_t i = room; i > room / 2 && cut == 0; i--)
        if ((what[i] == ' ') && (what[i - 1] == '.' || what[i - 1] == ';' || what[i - 1] == ':' || what[i - 1] == ','))
            cut = i - 1;
    for (size_t i = room; i > 0 && cut == 0; i--)
        if (what[i] == ' ') cut = i;
    if (cut == 0) cut = room;
    memcpy(out, what, cut);
    memcpy(out + cut, mark, sizeof mark);
}

static int reply_error(dmm_ipc_holder *h, ipc_conn *c, dmm_ipc_msg *r, dmm_status s, const char *what) {
    h->errors++;
    r->status = (uint32_t)(s == DMM_OK ? DMM_ERR_INVALID_ARGUMENT : s);
    r->body = DMM_IPC_BODY_NONE;
    dmm_log(DMM_LOG_WARN, "dmm hold: refused a request of client pid %d: %s", (int)c->pid, what);
    fit_text(r->text, sizeof r->text, what);
    for (char *p = r->text; *p; p++) /* a sentence with no control bytes: the reply's text field refuses them */
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
    return 0;
}

static ipc_region *find(dmm_ipc_holder *h, const char *name) {
    for (size_t i = 0; i < h->nregions; i++)
        if (strcmp(h->regions[i].name, name) == 0) return &h->regions[i];
    return NULL;
}

static bool token_eq(const uint8_t *a, const uint8_t *b) {
    uint8_t d = 0;
    for (size_t i = 0; i < DMM_EXPORT_TOKEN_BYTES; i++) d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
}

/* Releases region i's allocation and takes it out of the table (the last region moves into its slot). */
static dmm_release_outcome drop_at(dmm_ipc_holder *h, size_t i) {
    ipc_region *g = &h->regions[i];
    dmm_release_outcome o = dmm_mechanism_release(h->arena, &g->alloc);
    if (dmm_release_state_of(&o) != DMM_RELEASE_FAILED) { /* gone (or quarantined: never to be retried) */
        dmm_log(DMM_LOG_INFO, "dmm hold: region '%s' (%llu bytes) dropped: %s%s", g->name,
                 (unsigned long long)g->alloc.bytes, dmm_release_state_str(o.state),
                 o.exported_bytes ? "; importers that still map it keep its memory until they release it" : "");
        h->regions[i] = h->regions[--h->nregions];
    }
    return o;
}

/* Adds `seals` to every descriptor of an export of host memory (the memfds); 0, or the errno. */
static int seal(const dmm_export *ex, int seals) {
    for (uint32_t i = 0; i < ex->nchunks; i++)
        if (fcntl(ex->fds[i], F_ADD_SEALS, seals) != 0) return errno;
    return 0;
}

static int on_create(dmm_ipc_holder *h, ipc_conn *c, const dmm_ipc_msg *m, dmm_ipc_msg *r, int *fds, size_t *nfds) {
    char why[REPLY_WHY_MAX];
    if (find(h, m->name) != NULL) {
        snprintf(why, sizeof why, "create '%s': a region of that name exists; attach it with its token, or drop it "
                                  "first", m->name);
        return reply_error(h, c, r, DMM_ERR_INVALID_ARGUMENT, why);
    }
    uint64_t bytes = 0;
    if (!dmm_align_up(m->bytes, h->gran, &bytes) || bytes > (uint64_t)SIZE_MAX / 2) {
        snprintf(why, sizeof why, "create '%s': %llu bytes is more than any region can hold", m->name,
                 (unsigned long long)m->bytes);
        return reply_error(h, c, r, DMM_ERR_INVALID_ARGUMENT, why);
    }
    if (h->nregions == h->capregions) {
        size_t cap = h->capregions ? h->capregions * 2 : 16;
        ipc_region *v = cap <= DMM_IPC_MAX_REGIONS ? realloc(h->regions, cap * sizeof *v) : NULL;
        if (v == NULL) {
            snprintf(why, sizeof why, "create '%s': the holder holds %zu regions, its most; drop some first", m->name,
                     h->nregions);
            return reply_error(h, c, r, DMM_ERR_OUT_OF_MEMORY, why);
        }
        h->regions = v;
        h->capregions = cap;
    }
    ipc_region g;
    memset(&g, 0, sizeof g);
    snprintf(g.name, sizeof g.name, "%s", m->name);
    g.conn = (m->flags & DMM_IPC_PRIVATE) ? c->id : 0;
    g.pending = (m->flags & DMM_IPC_PRIVATE) ? 0 : c->id;
    dmm_status s = dmm_mechanism_allocate(h->arena, (size_t)bytes, (size_t)h->gran, &g.alloc);
    if (s == DMM_OK) s = dmm_export_range(h->arena, &g.alloc, (dmm_range){0, (size_t)bytes}, DMM_ACCESS_READ_WRITE, &r->ex);
    int e = 0;
    if (s == DMM_OK && r->ex.device.tier == DMM_TIER_HOST && (e = seal(&r->ex, F_SEAL_SHRINK | F_SEAL_GROW)) != 0) {
        dmm_export_close(&r->ex);
        s = dmm_error_set(DMM_ERR_UNSUPPORTED, "its memory cannot be sealed against resizing (fcntl F_ADD_SEALS, errno "
                                               "%d): the host driver must make memfds that allow sealing", e);
    }
    if (s != DMM_OK) {
        char cause[REPLY_WHY_MAX], held[32], limit[32], asked[32];
        snprintf(cause, sizeof cause, "%s", dmm_last_error());
        dmm_tier_usage tu = {.size = sizeof tu};
        if (s == DMM_ERR_BUDGET && dmm_governor_tier_usage(h->gov, h->drv->device, &tu) == DMM_OK)
            /* the holder's own words first: its limit is a flag of `dmm hold`, not a call */
            snprintf(why, sizeof why, "create '%s' of %s: over the holder's limit (%s held of %s); drop regions, or "
                                      "start the holder with a larger --limit. %.600s",
                     m->name, dmm__fmt_bytes(bytes, asked, sizeof asked),
                     dmm__fmt_bytes(tu.used[DMM_AXIS_OWNED], held, sizeof held),
                     dmm__fmt_bytes(tu.limit[DMM_AXIS_OWNED], limit, sizeof limit), cause);
        else
            snprintf(why, sizeof why, "create '%s' of %llu bytes: %.600s", m->name, (unsigned long long)bytes, cause);
        if (g.alloc.ptr != NULL) (void)dmm_mechanism_release(h->arena, &g.alloc);
        return reply_error(h, c, r, s, why);
    }
    memcpy(g.token, r->ex.token, sizeof g.token);
    h->regions[h->nregions++] = g;
    r->body = DMM_IPC_BODY_EXPORT;
    for (uint32_t i = 0; i < r->ex.nchunks; i++) fds[i] = r->ex.fds[i];
    *nfds = r->ex.nchunks;
    snprintf(r->text, sizeof r->text, "created '%s' (%llu bytes%s)", g.name, (unsigned long long)bytes,
             g.conn ? ", private to this connection" : "; it is this connection's until you say you took the token");
    return 0;
}

static int on_taken(dmm_ipc_holder *h, ipc_conn *c, const dmm_ipc_msg *m, dmm_ipc_msg *r) {
    char why[REPLY_WHY_MAX];
    ipc_region *g = find(h, m->name);
    if (g == NULL || !token_eq(g->token, m->token)) {
        snprintf(why, sizeof why, "taken '%s': no region of that name with that token", m->name);
        return reply_error(h, c, r, DMM_ERR_UNKNOWN_ALLOCATION, why);
    }
    if (g->conn != 0 || (g->pending != 0 && g->pending != c->id)) {
        snprintf(why, sizeof why, "taken '%s': %s; nothing changed", m->name,
                 g->conn ? "a private region goes with its connection, there is nothing to take"
                         : "another connection created it and has not taken it yet");
        return reply_error(h, c, r, DMM_ERR_INVALID_ARGUMENT, why);
    }
    g->pending = 0;
    snprintf(r->text, sizeof r->text, "'%s' is named: it stays until dropped", g->name);
    return 0;
}

/* Publishes region g read-only (the first read-only attach): sealed over host memory. false: *r is the
 * error reply. */
static bool publish_read_only(dmm_ipc_holder *h, ipc_conn *c, ipc_region *g, dmm_ipc_msg *r) {
    char why[REPLY_WHY_MAX];
    dmm_export rw;
    dmm_status s = dmm_export_range(h->arena, &g->alloc, (dmm_range){0, g->alloc.bytes}, DMM_ACCESS_READ_WRITE, &rw);
    if (s != DMM_OK) {
        snprintf(why, sizeof why, "attach '%s' read-only: sealing it needs a descriptor: %s", g->name, dmm_last_error());
        (void)reply_error(h, c, r, s, why);
        return false;
    }
    int e = rw.device.tier == DMM_TIER_HOST ? seal(&rw, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) : 0;
    dmm_export_close(&rw);
    if (e != 0) {
        snprintf(why, sizeof why, "attach '%s' read-only: the region cannot be sealed against writing (fcntl "
                                  "F_ADD_SEALS, errno %d); nothing was handed out", g->name, e);
        (void)reply_error(h, c, r, DMM_ERR_UNSUPPORTED, why);
        return false;
    }
    g->read_only = true;
    dmm_log(DMM_LOG_INFO, "dmm hold: region '%s' published read-only (%s); read-write attaches are refused from now on",
             g->name, rw.device.tier == DMM_TIER_HOST ? "sealed by the kernel" : "advisory over this device");
    return true;
}

static int on_attach(dmm_ipc_holder *h, ipc_conn *c, const dmm_ipc_msg *m, dmm_ipc_msg *r, int *fds, size_t *nfds) {
    char why[REPLY_WHY_MAX];
    ipc_region *g = find(h, m->name);
    if (g == NULL || !token_eq(g->token, m->token)) {
        /* one answer for both: a wrong token does not tell whether the name exists */
        snprintf(why, sizeof why, "attach '%s': no region of that name with that token; check the name and the token "
                                  "its creator received", m->name);
        return reply_error(h, c, r, DMM_ERR_UNKNOWN_ALLOCATION, why);
    }
    if (m->access == DMM_ACCESS_READ_WRITE && g->read_only) {
        snprintf(why, sizeof why, "attach '%s' read-write: the region was published read-only (sealed: no new writable "
                                  "mapping of it can be made); attach it read-only, or create a new region to write",
                 m->name);
        return reply_error(h, c, r, DMM_ERR_INVALID_ARGUMENT, why);
    }
    if (m->access == DMM_ACCESS_READ && !g->read_only && !publish_read_only(h, c, g, r)) return 0;
    dmm_status s = dmm_export_range(h->arena, &g->alloc, (dmm_range){0, g->alloc.bytes}, (dmm_access)m->access, &r->ex);
    if (s != DMM_OK) {
        snprintf(why, sizeof why, "attach '%s': %s", m->name, dmm_last_error());
        return reply_error(h, c, r, s, why);
    }
    memcpy(r->ex.token, g->token, sizeof g->token);
    r->body = DMM_IPC_BODY_EXPORT;
    for (uint32_t i = 0; i < r->ex.nchunks; i++) fds[i] = r->ex.fds[i];
    *nfds = r->ex.nchunks;
    snprintf(r->text, sizeof r->text, "attached '%s' (%llu bytes, %s)", g->name, (unsigned long long)g->alloc.bytes,
             m->access == DMM_ACCESS_READ ? "read-only" : "read-write");
    return 0;
}

static int on_drop(dmm_ipc_holder *h, ipc_conn *c, const dmm_ipc_msg *m, dmm_ipc_msg *r) {
    char why[REPLY_WHY_MAX];
    ipc_region *g = find(h, m->name);
    if (g == NULL || !token_eq(g->token, m->token)) {
        snprintf(why, sizeof why, "drop '%s': no region of that name with that token; check the name and the token",
                 m->name);
        return reply_error(h, c, r, DMM_ERR_UNKNOWN_ALLOCATION, why);
    }
    uint64_t bytes = g->alloc.bytes;
    dmm_release_outcome o = drop_at(h, (size_t)(g - h->regions));
    if (o.state != DMM_RELEASE_COMPLETE) {
        snprintf(why, sizeof why, "drop '%s': the release was %s: %s", m->name, dmm_release_state_str(o.state),
                 dmm_last_error());
        return reply_error(h, c, r, o.failure, why);
    }
    snprintf(r->text, sizeof r->text, "dropped '%s' (%llu bytes); importers that still map it keep it until they "
                                      "release it", m->name, (unsigned long long)bytes);
    return 0;
}

void dmm__holder_census(dmm_ipc_holder *h, dmm_ipc_census *k) {
    memset(k, 0, sizeof *k);
    k->size = (uint32_t)sizeof *k;
    k->regions = h->nregions;
    for (size_t i = 0; i < h->nregions; i++) {
        k->region_bytes += h->regions[i].alloc.bytes;
        k->private_regions += h->regions[i].conn != 0;
        k->pending_regions += h->regions[i].pending != 0;
    }
    dmm_stats st = {.size = sizeof st};
    if (dmm_mechanism_stats(h->arena, &st) == DMM_OK) k->owned_bytes = (uint64_t)st.owned_bytes.current;
    dmm_driver_census dc = {.size = sizeof dc};
    if (h->drv->ops->census != NULL && h->drv->ops->census(h->drv, &dc) == DMM_OK) k->handles = dc.handles;
    k->connections = h->nconns;
    k->refused = h->refused;
    k->errors = h->errors;
    k->hello_timeouts = h->hello_timeouts;
    k->evicted = h->evicted;
    k->wakeups = h->wakeups;
}

static int handle(dmm_ipc_holder *h, ipc_conn *c, const uint8_t *buf, dmm_ipc_rx *rx, dmm_ipc_msg *r, int *fds,
                  size_t *nfds) {
    dmm__ipc_msg_init(r, DMM_IPC_REPLY);
    *nfds = 0;
    char why[REPLY_WHY_MAX];
    size_t came = rx->nfds;
    dmm__ipc_close_fds(rx->fds, rx->nfds); /* a client never sends descriptors */
    rx->nfds = 0;
    r->seq = c->seq + 1;
    if (rx->oversized) return reply_error(h, c, r, DMM_ERR_INVALID_ARGUMENT, "the message is longer than any request "
                                                                             "of the protocol (oversized); nothing changed");
    if (came > 0 || rx->fds_cut) {
        snprintf(why, sizeof why, "the message came with %zu descriptor(s); a client sends none; nothing changed", came);
        return reply_error(h, c, r, DMM_ERR_INVALID_ARGUMENT, why);
    }
    dmm_ipc_msg m;
    dmm_status s = dmm__ipc_decode(buf, rx->len, &m);
    if (s != DMM_OK) return reply_error(h, c, r, s, dmm_last_error());
    if (m.type == DMM_IPC_REPLY || m.type == DMM_IPC_EXPORT) {
        snprintf(why, sizeof why, "message type %u is not a request; nothing changed", m.type);
        return reply_error(h, c, r, DMM_ERR_INVALID_ARGUMENT, why);
    }
    if (m.seq != c->seq + 1) {
        snprintf(why, sizeof why, "request numbered %u came after %u: requests are numbered 1, 2, 3, ... (out of order); "
                                  "nothing changed", m.seq, c->seq);
        return reply_error(h, c, r, DMM_ERR_INVALID_ARGUMENT, why);
    }
    if ((m.type == DMM_IPC_HELLO) == c->hello) {
        return reply_error(h, c, r, DMM_ERR_INVALID_ARGUMENT,
                           c->hello ? "a second hello (out of order); nothing changed"
                                    : "the first message must be a hello (out of order); nothing changed");
    }
    c->seq = m.seq;
    r->seq = m.seq;
    switch (m.type) {
    case DMM_IPC_HELLO:
        if (m.version != DMM_IPC_VERSION) {
            c->seq = 0;
            snprintf(why, sizeof why, "hello with protocol version %u; this holder speaks %u", m.version, DMM_IPC_VERSION);
            return reply_error(h, c, r, DMM_ERR_VERSION_MISMATCH, why);
        }
        c->hello = true;
        snprintf(r->text, sizeof r->text, "hello");
        return 0;
    case DMM_IPC_CREATE: return on_create(h, c, &m, r, fds, nfds);
    case DMM_IPC_ATTACH: return on_attach(h, c, &m, r, fds, nfds);
    case DMM_IPC_DROP: return on_drop(h, c, &m, r);
    case DMM_IPC_TAKEN: return on_taken(h, c, &m, r);
    case DMM_IPC_CENSUS:
        r->body = DMM_IPC_BODY_CENSUS;
        dmm__holder_census(h, &r->census);
        return 0;
    default: return reply_error(h, c, r, DMM_ERR_INVALID_ARGUMENT, "unknown request; nothing changed");
    }
}

void dmm__holder_handle(dmm_ipc_holder *h, ipc_conn *c, const uint8_t *buf, dmm_ipc_rx *rx, dmm_ipc_msg *r, int *fds,
                        size_t *nfds) {
    (void)handle(h, c, buf, rx, r, fds, nfds);
}

void dmm__holder_conn_gone(dmm_ipc_holder *h, uint64_t id) {
    for (size_t i = h->nregions; i-- > 0;)
        if (h->regions[i].conn == id || h->regions[i].pending == id) (void)drop_at(h, i);
}

dmm_status dmm__holder_drop_all(dmm_ipc_holder *h) {
    dmm_error_kept first = {0};
    for (size_t i = h->nregions; i-- > 0;) {
        dmm_release_outcome o = drop_at(h, i);
        if (o.state != DMM_RELEASE_COMPLETE) dmm__error_keep(&first, o.failure);
    }
    return dmm__error_restore(&first);
}
