/* SPDX-License-Identifier: Apache-2.0 */
/* src/ipc/peer.c — one export passed between two processes over a connected socket, without a
 * holder (dmm_ipc_send_export, dmm_ipc_recv_export): an EXPORT message of the holder protocol with
 * its descriptors. The receiver keeps nothing before every value was checked (sock.c, wire.c,
 * dmm_export_check). */
#include "core/core.h"
#include "ipc/sock.h"

dmm_status dmm_ipc_send_export(int sock, const dmm_export *ex) {
    dmm_status s = dmm_export_check(ex, true);
    if (s != DMM_OK) return dmm__error_wrap(s, "dmm_ipc_send_export refused, nothing was sent");
    dmm_ipc_msg m;
    dmm__ipc_msg_init(&m, DMM_IPC_EXPORT);
    m.ex = *ex;
    s = dmm__ipc_send(sock, &m, ex->fds, ex->nchunks);
    return s == DMM_OK ? DMM_OK : dmm__error_wrap(s, "dmm_ipc_send_export");
}

dmm_status dmm_ipc_recv_export(int sock, dmm_export *out) {
    if (out == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_ipc_recv_export: the output is NULL");
    dmm_export_init(out);
    dmm_ipc_msg m;
    dmm_status s = dmm__ipc_recv_msg(sock, 0, &m, "an export");
    if (s != DMM_OK) return s;
    if (m.type != DMM_IPC_EXPORT) {
        dmm_export_close(&m.ex);
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "dmm_ipc_recv_export: a message of type %u came, not an export",
                             m.type);
    }
    *out = m.ex;
    return DMM_OK;
}
