/* SPDX-License-Identifier: Apache-2.0 */
/* Uses the installed dmm_torch.h and libdmm_torch.so from C: a host of the torch adapter other than
 * Python (tests/install/CMakeLists.txt builds it where the install has them). No GPU is touched. */
#include <dmm_torch.h>
#include <stdio.h>

int main(void) {
    char buf[256];
    size_t n = dmm_torch_last_error(buf, sizeof buf);
    uint64_t t = dmm_torch_now_ns();
    if (t == 0 || dmm_torch_last_status() != 0 || n != 0) {
        fprintf(stderr, "libdmm_torch: now_ns %llu, last status %d, last error \"%s\"\n", (unsigned long long)t,
                dmm_torch_last_status(), buf);
        return 1;
    }
    printf("libdmm_torch answers (now_ns %llu)\n", (unsigned long long)t);
    return 0;
}
