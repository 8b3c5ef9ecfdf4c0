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
 *     region, private regions only of the live connection; when the connection closes, its private
 *     regions are gone.
 */
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
    dmm_ipc_holder_config cfg = {sizeof cfg, path, (uint64_t)256 << 20, NULL};
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
    for (size_t i = 0; i < holder->nregions; i++)
        FUZZ_ASSERT(holder->regions[i].conn == 0 || holder->regions[i].conn == live_conn,
                    "region '%s' is private to a closed connection", holder->regions[i].name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    holder_once();
    ipc_conn conn = {-1, ++next_conn, 0, false, 0};
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
    return 0;
}
