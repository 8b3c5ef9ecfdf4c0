/* SPDX-License-Identifier: Apache-2.0 */
/* tests/fuzz/fuzz_ipc.c — the holder protocol (src/ipc/wire.c, src/ipc/requests.c) on hostile input.
 *
 * The input is a sequence of records, each a u16 length (little-endian) and that many bytes: what one
 * client sends on one connection. Every record goes to the parser alone, and then, in order, to a
 * holder (one per process, over the host driver, --limit 256 MiB) through the very function that
 * answers a client's record (dmm__holder_handle), as one connection that closes at the end of the
 * input. What must hold:
 *   - the parser never reads past the record (ASan), and a record it accepts lays out again to the
 *     same bytes (it accepts only what the encoder could have written);
 *   - every record gets a reply that lays out, whose seq is the one the connection is at, that is
 *     DMM_OK or carries a sentence, and that comes with descriptors exactly when it carries an export
 *     (one per chunk);
 *   - after every record the holder's census holds: owned bytes = the regions' bytes, one handle per
 *     region, private and pending regions only of the live connection; when the connection closes,
 *     its private regions and the named ones whose token it never took are gone.
 * Then the same input drives the holder's admission and deadlines (connections.c), two bytes an event:
 * a connection of the holder's uid or of another comes (a real socketpair), one says hello, or the
 * clock moves on and expired connections are closed. After every event: at most max_connections in
 * all and max_connections_per_uid of a uid, no other uid admitted, no connection without hello past
 * its deadline, the nearest deadline reported is the earliest one left, and every connection that
 * came is served, refused, evicted, timed out or closed by us (nothing lost, nothing leaked).
 */
#include <sys/socket.h>
#include <unistd.h>

#include "fuzzkit.h"
#include "ipc/holder_types.h"

static dmm_ipc_holder *holder;
static uint64_t next_conn = 1u << 30; /* far from the holder's own ids */

static void holder_once(void) {
    if (holder != NULL) return;
    char dir[] = "/tmp/dmm-fuzz-ipc-XXXXXX";
    FUZZ_ASSERT(mkdtemp(dir) != NULL, "mkdtemp failed");
    char path[96];
    snprintf(path, sizeof path, "%s/s", dir);
    dmm_ipc_holder_config cfg = {.size = sizeof cfg, .socket_path = path, .limit_bytes = (uint64_t)256 << 20,
                                 .hello_deadline_ms = 1000, .max_connections = 8, .max_connections_per_uid = 6};
    FUZZ_ASSERT(dmm_ipc_holder_create(&cfg, &holder) == DMM_OK, "no holder: %s", dmm_last_error());
    unlink(path); /* nobody connects: the harness calls the handler itself */
    rmdir(dir);
}

static void census_holds(uint64_t live_conn) {
    dmm_ipc_census k = {.size = sizeof k};
    FUZZ_ASSERT(dmm_ipc_holder_census(holder, &k) == DMM_OK, "census: %s", dmm_last_error());
    FUZZ_ASSERT(k.owned_bytes == k.region_bytes, "owned %llu, regions %llu", (unsigned long long)k.owned_bytes,
                (unsigned long long)k.region_bytes);
    FUZZ_ASSERT(k.handles == k.regions, "%llu handles for %llu regions", (unsigned long long)k.handles,
                (unsigned long long)k.regions);
    for (size_t i = 0; i < holder->nregions; i++) {
        FUZZ_ASSERT(holder->regions[i].conn == 0 || holder->regions[i].conn == live_conn,
                    "region '%s' is private to a closed connection", holder->regions[i].name);
        FUZZ_ASSERT(holder->regions[i].pending == 0 || holder->regions[i].pending == live_conn,
                    "region '%s' is pending on a closed connection", holder->regions[i].name);
    }
}

/* The limits and deadlines hold after an event at time now (ns). */
static void limits_hold(uint64_t now, bool expired) {
    FUZZ_ASSERT(holder->nconns <= holder->max_conns, "%zu connections, at most %u", holder->nconns, holder->max_conns);
    uint64_t earliest = 0;
    for (size_t i = 0; i < holder->nconns; i++) {
        const ipc_conn *c = &holder->conns[i];
        FUZZ_ASSERT(c->uid == holder->uid, "a connection of uid %u was admitted", (unsigned)c->uid);
        size_t same = 0;
        for (size_t j = 0; j < holder->nconns; j++) same += holder->conns[j].uid == c->uid;
        FUZZ_ASSERT(same <= holder->max_per_uid, "%zu connections of uid %u, at most %u", same, (unsigned)c->uid,
                    holder->max_per_uid);
        if (c->hello) continue;
        FUZZ_ASSERT(!expired || c->hello_by_ns > now, "a connection without hello outlived its deadline");
        if (earliest == 0 || c->hello_by_ns < earliest) earliest = c->hello_by_ns;
    }
    if (expired) FUZZ_ASSERT(dmm__holder_expire(holder, now) == earliest, "the nearest deadline is not the earliest left");
}

/* Admission and deadlines driven by the input (two bytes an event). */
static void admission(const uint8_t *data, size_t size) {
    static uint64_t now = (uint64_t)1 << 40; /* ns; only ever moves on */
    dmm_ipc_census k0 = {.size = sizeof k0};
    dmm_ipc_holder_census(holder, &k0);
    uint64_t came = 0, closed_by_us = 0;
    for (size_t at = 0; at + 1 < size && at < 512; at += 2) {
        uint8_t op = data[at] % 4, arg = data[at + 1];
        bool expired = false;
        if (op <= 1) { /* a connection comes: of the holder's uid (0) or another's (1) */
            int sv[2];
            FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0, "socketpair failed");
            close(sv[1]); /* the peer: gone at once; the holder's replies to it are dropped */
            came++;
            dmm__holder_admit(holder, sv[0], op == 0 ? holder->uid : holder->uid + 1 + arg, 4242, now);
        } else if (op == 2 && holder->nconns > 0) { /* one of them says hello (through the request handler) */
            ipc_conn *c = &holder->conns[arg % holder->nconns];
            bool had = c->hello;
            uint8_t rec[DMM_IPC_MAX_MESSAGE];
            size_t len = 0;
            dmm_ipc_msg m, reply;
            dmm__ipc_msg_init(&m, DMM_IPC_HELLO);
            m.version = DMM_IPC_VERSION;
            m.seq = c->seq + 1;
            FUZZ_ASSERT(dmm__ipc_encode(&m, rec, sizeof rec, &len) == DMM_OK, "hello: %s", dmm_last_error());
            dmm_ipc_rx rx;
            memset(&rx, 0, sizeof rx);
            for (size_t i = 0; i < DMM_EXPORT_MAX_CHUNKS; i++) rx.fds[i] = -1;
            rx.len = len;
            int fds[DMM_EXPORT_MAX_CHUNKS];
            size_t nfds = 0;
            dmm__holder_handle(holder, c, rec, &rx, &reply, fds, &nfds);
            FUZZ_ASSERT(nfds == 0, "a hello answered with descriptors");
            FUZZ_ASSERT(had || c->hello == (reply.status == DMM_OK), "hello answered %u but hello is %d", reply.status,
                        c->hello);
        } else if (op == 3 && holder->nconns > 0 && arg >= 250) { /* a client goes */
            dmm__holder_conn_close(holder, (size_t)arg % holder->nconns);
            closed_by_us++;
        } else { /* the clock moves on */
            now += (uint64_t)arg * 16 * 1000000u;
            (void)dmm__holder_expire(holder, now);
            expired = true;
        }
        limits_hold(now, expired);
    }
    dmm_ipc_census k1 = {.size = sizeof k1};
    dmm_ipc_holder_census(holder, &k1);
    uint64_t gone = (k1.refused - k0.refused) + (k1.evicted - k0.evicted) + (k1.hello_timeouts - k0.hello_timeouts) +
                    closed_by_us;
    FUZZ_ASSERT(came == gone + holder->nconns - k0.connections, "%llu came; %llu went and %zu stay (%llu before)",
                (unsigned long long)came, (unsigned long long)gone, holder->nconns,
                (unsigned long long)k0.connections);
    while (holder->nconns > 0) dmm__holder_conn_close(holder, holder->nconns - 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    holder_once();
    ipc_conn conn = {.fd = -1, .id = ++next_conn, .uid = holder->uid, .hello_by_ns = UINT64_MAX};
    fuzz_in in = fuzz_in_of(data, size);
    while (!fuzz_done(&in)) {
        size_t n = (size_t)fuzz_bits(&in, 2);
        if (n > in.n) n = in.n;
        uint8_t *rec = malloc(n ? n : 1); /* exactly the record: ASan sees any read past it */
        FUZZ_ASSERT(rec != NULL, "out of memory");
        memcpy(rec, in.p, n);
        in.p += n;
        in.n -= n;

        dmm_ipc_msg m;
        if (dmm__ipc_decode(rec, n, &m) == DMM_OK) {
            uint8_t again[DMM_IPC_MAX_MESSAGE];
            size_t len = 0;
            FUZZ_ASSERT(dmm__ipc_encode(&m, again, sizeof again, &len) == DMM_OK, "an accepted record does not lay out: %s",
                        dmm_last_error());
            FUZZ_ASSERT(len == n && memcmp(again, rec, n) == 0, "an accepted record of %zu bytes lays out as %zu other bytes",
                        n, len);
        } else {
            FUZZ_ASSERT(dmm_last_error()[0] != '\0', "a refusal without a sentence");
        }

        dmm_ipc_rx rx;
        memset(&rx, 0, sizeof rx);
        for (size_t i = 0; i < DMM_EXPORT_MAX_CHUNKS; i++) rx.fds[i] = -1;
        rx.len = n;
        dmm_ipc_msg reply;
        int fds[DMM_EXPORT_MAX_CHUNKS];
        size_t nfds = 99;
        uint32_t seq0 = conn.seq;
        dmm__holder_handle(holder, &conn, rec, &rx, &reply, fds, &nfds);
        uint8_t out[DMM_IPC_MAX_MESSAGE];
        size_t len = 0;
        FUZZ_ASSERT(dmm__ipc_encode(&reply, out, sizeof out, &len) == DMM_OK, "a reply that does not lay out: %s",
                    dmm_last_error());
        FUZZ_ASSERT(reply.type == DMM_IPC_REPLY, "a reply of type %u", reply.type);
        FUZZ_ASSERT(reply.status == DMM_OK || reply.text[0] != '\0', "a refusal without a sentence");
        FUZZ_ASSERT(conn.seq == seq0 || conn.seq == seq0 + 1, "the connection's number jumped %u -> %u", seq0, conn.seq);
        bool exports = reply.status == DMM_OK && reply.body == DMM_IPC_BODY_EXPORT;
        FUZZ_ASSERT(nfds == (exports ? reply.ex.nchunks : 0), "%zu descriptors with a reply of body %u", nfds, reply.body);
        for (size_t i = 0; i < nfds; i++) FUZZ_ASSERT(fds[i] >= 0, "descriptor %zu is %d", i, fds[i]);
        for (size_t i = 0; i < nfds; i++) close(fds[i]);
        free(rec);
        census_holds(conn.id);
    }
    dmm__holder_conn_gone(holder, conn.id);
    census_holds(0);
    admission(data, size);
    return 0;
}
