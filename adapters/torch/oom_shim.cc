/* adapters/torch/oom_shim.cc — dmm_torch_malloc that turns a failure into a C++ exception.
 *
 * torch's CUDAPluggableAllocator does not check the pointer its malloc function returns: a NULL for a
 * tensor of N > 0 bytes becomes a tensor at address 0, and the first kernel that touches it kills the
 * CUDA context. A std::runtime_error thrown here instead unwinds through torch (no C frame in between)
 * and reaches Python as a RuntimeError carrying dmm's sentence (budget, out of memory, a capture with
 * no graph memory). DMM_TORCH_OOM=null restores the plain NULL return. This is the only C++ in dmm.
 */
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "dmm_torch.h"

static bool throw_on_failure() {
    const char *e = std::getenv("DMM_TORCH_OOM");
    return e == nullptr || std::strcmp(e, "null") != 0;
}

void *dmm_torch_malloc(ssize_t size, int device, void *stream) {
    void *p = dmm_torch_malloc_nothrow(size, device, stream);
    if (p == nullptr && size > 0 && throw_on_failure()) {
        char why[2048];
        dmm_torch_last_error(why, sizeof why);
        throw std::runtime_error(std::string("dmm: ") + why);
    }
    return p;
}
