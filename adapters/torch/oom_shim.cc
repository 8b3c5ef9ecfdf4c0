/* SPDX-License-Identifier: Apache-2.0 */
/* adapters/torch/oom_shim.cc — dmm_torch_malloc that turns a failure into a C++ exception.
 *
 * torch's CUDAPluggableAllocator does not check the pointer its malloc function returns: a NULL for a
 * tensor of N > 0 bytes becomes a tensor at address 0, and the first kernel that touches it kills the
 * CUDA context. An exception thrown here instead unwinds through torch (no C frame in between) and
 * reaches Python carrying dmm's sentence:
 *   - built against torch's headers (DMM_TORCH_OOM_ERROR, CMake finds them next to the python3's
 *     torch), a refusal for budget or memory throws c10::OutOfMemoryError, which torch raises as
 *     torch.cuda.OutOfMemoryError (`except torch.cuda.OutOfMemoryError` catches it, as with torch's
 *     own allocator); any other failure (a capture with no graph memory, a lost device) throws
 *     c10::Error → RuntimeError;
 *   - built without them, every failure throws std::runtime_error → RuntimeError.
 * DMM_TORCH_OOM=null restores the plain NULL return. This is the only C++ in dmm.
 */
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/options.h"
#include "dmm/status.h"
#include "dmm_torch.h"

#ifdef DMM_TORCH_OOM_ERROR
#include <c10/util/Exception.h>
#endif

static bool throw_on_failure() {
    const char *e = dmm__option_env(DMM_OPTION_TORCH_OOM); /* unset or empty: NULL */
    return e == nullptr || std::strcmp(e, "null") != 0;
}

void *dmm_torch_malloc(ssize_t size, int device, void *stream) {
    void *p = dmm_torch_malloc_nothrow(size, device, stream);
    if (p == nullptr && size > 0 && throw_on_failure()) {
        char why[2048];
        dmm_torch_last_error(why, sizeof why);
        std::string msg = std::string("dmm: ") + why;
#ifdef DMM_TORCH_OOM_ERROR
        int s = dmm_torch_last_status();
        c10::SourceLocation at{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
        if (s == DMM_ERR_BUDGET || s == DMM_ERR_OUT_OF_MEMORY) throw c10::OutOfMemoryError(at, msg);
        throw c10::Error(at, msg);
#else
        throw std::runtime_error(msg);
#endif
    }
    return p;
}
