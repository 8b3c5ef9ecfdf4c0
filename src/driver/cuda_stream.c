/* SPDX-License-Identifier: Apache-2.0 */
/* src/driver/cuda_stream.c — the `cuda` driver's streams, events and copies: thin ops over the CUDA
 * driver API. They keep no records (CUDA owns the objects); each enters the driver (refused once the
 * device is lost, else the primary context made current) and maps a failure through dmm__cuda_fail.
 * CUDA_ERROR_NOT_READY from an event query is DMM_ERR_BUSY, not a failure.
 * Streams are created non-blocking and events without timing (the pool only orders and polls).
 * The capture query and the event wait make no context current: both name their stream, and the
 * capture query runs on every malloc of a device front on a non-default stream.
 */
#include "driver/cuda_types.h"

dmm_status dmm__cuda_stream_create(dmm_driver *d, dmm_stream *stream) {
    cuda_driver *c = as_cuda(d);
    if (stream == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda stream_create: stream is NULL");
    dmm_status s = dmm__cuda_enter(c, "cuStreamCreate");
    if (s != DMM_OK) return s;
    dmm_cu_stream st = NULL;
    dmm_cu_result r = dmm__cu.cuStreamCreate(&st, DMM_CU_STREAM_NON_BLOCKING);
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuStreamCreate", "flags=CU_STREAM_NON_BLOCKING");
    *stream = (dmm_stream)st;
    return DMM_OK;
}

dmm_status dmm__cuda_stream_destroy(dmm_driver *d, dmm_stream stream) {
    cuda_driver *c = as_cuda(d);
    if (stream == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda stream_destroy: the default stream cannot be destroyed");
    dmm_status s = dmm__cuda_enter(c, "cuStreamDestroy");
    if (s != DMM_OK) return s;
    dmm_cu_result r = dmm__cu.cuStreamDestroy((dmm_cu_stream)stream);
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuStreamDestroy", "stream=%p", stream);
    return DMM_OK;
}

dmm_status dmm__cuda_event_create(dmm_driver *d, dmm_event *event) {
    cuda_driver *c = as_cuda(d);
    if (event == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda event_create: event is NULL");
    dmm_status s = dmm__cuda_enter(c, "cuEventCreate");
    if (s != DMM_OK) return s;
    dmm_cu_event e = NULL;
    dmm_cu_result r = dmm__cu.cuEventCreate(&e, DMM_CU_EVENT_DISABLE_TIMING);
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuEventCreate", "flags=CU_EVENT_DISABLE_TIMING");
    *event = (dmm_event)e;
    return DMM_OK;
}

dmm_status dmm__cuda_event_destroy(dmm_driver *d, dmm_event event) {
    cuda_driver *c = as_cuda(d);
    if (event == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda event_destroy: event is NULL");
    dmm_status s = dmm__cuda_enter(c, "cuEventDestroy");
    if (s != DMM_OK) return s;
    dmm_cu_result r = dmm__cu.cuEventDestroy((dmm_cu_event)event);
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuEventDestroy", "event=%p", event);
    return DMM_OK;
}

dmm_status dmm__cuda_event_record(dmm_driver *d, dmm_event event, dmm_stream stream) {
    cuda_driver *c = as_cuda(d);
    if (event == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda event_record: event is NULL");
    dmm_status s = dmm__cuda_enter(c, "cuEventRecord");
    if (s != DMM_OK) return s;
    dmm_cu_result r = dmm__cu.cuEventRecord((dmm_cu_event)event, (dmm_cu_stream)stream);
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuEventRecord", "event=%p, stream=%p", event, stream);
    return DMM_OK;
}

dmm_status dmm__cuda_event_query(dmm_driver *d, dmm_event event) {
    cuda_driver *c = as_cuda(d);
    if (event == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda event_query: event is NULL");
    dmm_status s = dmm__cuda_enter(c, "cuEventQuery");
    if (s != DMM_OK) return s;
    dmm_cu_result r = dmm__cu.cuEventQuery((dmm_cu_event)event);
    if (r == DMM_CUDA_SUCCESS) return DMM_OK;
    if (r == DMM_CUDA_ERROR_NOT_READY)
        return dmm_error_set(DMM_ERR_BUSY, "cuda driver (device %d): cuEventQuery(event=%p): the work before the "
                             "event is still queued (CUDA_ERROR_NOT_READY (600)); query again later",
                             (int)c->base.device.index, event);
    return dmm__cuda_fail(c, r, "cuEventQuery", "event=%p", event);
}

dmm_status dmm__cuda_event_synchronize(dmm_driver *d, dmm_event event) {
    cuda_driver *c = as_cuda(d);
    if (event == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda event_synchronize: event is NULL");
    dmm_status s = dmm__cuda_enter(c, "cuEventSynchronize");
    if (s != DMM_OK) return s;
    dmm_cu_result r = dmm__cu.cuEventSynchronize((dmm_cu_event)event);
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuEventSynchronize", "event=%p", event);
    return DMM_OK;
}

dmm_status dmm__cuda_copy(dmm_driver *d, uintptr_t dst, uintptr_t src, size_t bytes, dmm_stream stream) {
    cuda_driver *c = as_cuda(d);
    if (bytes != 0 && (dst == 0 || src == 0))
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda copy(dst=0x%llx, src=0x%llx, bytes=%zu): a NULL pointer",
                             (unsigned long long)dst, (unsigned long long)src, bytes);
    dmm_status s = dmm__cuda_enter(c, "cuMemcpyAsync");
    if (s != DMM_OK || bytes == 0) return s;
    dmm_cu_result r = dmm__cu.cuMemcpyAsync((dmm_cu_deviceptr)dst, (dmm_cu_deviceptr)src, bytes, (dmm_cu_stream)stream);
    if (r != DMM_CUDA_SUCCESS)
        return dmm__cuda_fail(c, r, "cuMemcpyAsync", "dst=0x%llx, src=0x%llx, bytes=%zu, stream=%p",
                              (unsigned long long)dst, (unsigned long long)src, bytes, stream);
    return DMM_OK;
}

dmm_status dmm__cuda_stream_synchronize(dmm_driver *d, dmm_stream stream) {
    cuda_driver *c = as_cuda(d);
    dmm_status s = dmm__cuda_enter(c, "cuStreamSynchronize");
    if (s != DMM_OK) return s;
    dmm_cu_result r = dmm__cu.cuStreamSynchronize((dmm_cu_stream)stream);
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuStreamSynchronize", "stream=%p", stream);
    return DMM_OK;
}

dmm_status dmm__cuda_device_synchronize(dmm_driver *d) {
    cuda_driver *c = as_cuda(d);
    dmm_status s = dmm__cuda_enter(c, "cuCtxSynchronize");
    if (s != DMM_OK) return s;
    dmm_cu_result r = dmm__cu.cuCtxSynchronize();
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuCtxSynchronize", "device %d", (int)d->device.index);
    return DMM_OK;
}

dmm_status dmm__cuda_stream_capture_status(dmm_driver *d, dmm_stream stream, bool *capturing, uint64_t *id) {
    cuda_driver *c = as_cuda(d);
    if (capturing == NULL || id == NULL)
        return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda stream_capture_status: capturing and id are required");
    *capturing = false;
    *id = 0;
    if (dmm__cuda_is_lost(c)) return dmm__cuda_lost_error(c, "cuStreamIsCapturing");
    dmm_cu_stream_capture_status st = DMM_CU_STREAM_CAPTURE_STATUS_NONE;
    dmm_cu_result r = dmm__cu.cuStreamIsCapturing((dmm_cu_stream)stream, &st);
    if (r == DMM_CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) { /* the legacy stream while another captures: don't map */
        *capturing = true;
        return DMM_OK;
    }
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuStreamIsCapturing", "stream=%p", stream);
    if (st == DMM_CU_STREAM_CAPTURE_STATUS_NONE) return DMM_OK;
    *capturing = true;
    uint64_t cid = 0;
    if (dmm__cu_capture_info_v3 != NULL) r = dmm__cu_capture_info_v3((dmm_cu_stream)stream, &st, &cid, NULL, NULL, NULL, NULL);
    else if (dmm__cu_capture_info_v2 != NULL) r = dmm__cu_capture_info_v2((dmm_cu_stream)stream, &st, &cid, NULL, NULL, NULL);
    else r = DMM_CUDA_ERROR_NOT_SUPPORTED;
    if (r == DMM_CUDA_SUCCESS) *id = cid; /* else the id stays unknown (0): the capture is still reported */
    return DMM_OK;
}

dmm_status dmm__cuda_stream_wait_event(dmm_driver *d, dmm_stream waiter, dmm_event event) {
    cuda_driver *c = as_cuda(d);
    if (event == NULL) return dmm_error_set(DMM_ERR_INVALID_ARGUMENT, "cuda stream_wait_event: event is NULL");
    if (dmm__cuda_is_lost(c)) return dmm__cuda_lost_error(c, "cuStreamWaitEvent");
    dmm_cu_result r = dmm__cu.cuStreamWaitEvent((dmm_cu_stream)waiter, (dmm_cu_event)event, 0);
    if (r != DMM_CUDA_SUCCESS) return dmm__cuda_fail(c, r, "cuStreamWaitEvent", "stream=%p, event=%p", waiter, event);
    return DMM_OK;
}
