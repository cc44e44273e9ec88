/*
 * Free memory on macOS, where there is no /proc: the Mach VM statistics.
 * Memory the kernel would hand an application without swapping is the free,
 * inactive and purgeable pages (the pages Activity Monitor calls "available"
 * are counted the same way). Built only on Apple platforms.
 */
#if defined(__APPLE__)
#include "sched/sched_impl.h"

#include <mach/mach.h>
#include <sys/sysctl.h>

lares_status sched_probe_memory_macos(sched_device *d, lares_error *err) {
    uint64_t total = 0;
    size_t n = sizeof total;
    if (sysctlbyname("hw.memsize", &total, &n, NULL, 0) != 0 || total == 0) {
        return lares_fail(err, LARES_EIO, "sysctl hw.memsize failed");
    }
    vm_statistics64_data_t vs;
    mach_msg_type_number_t count = HOST_VM_INFO64_COUNT;
    if (host_statistics64(mach_host_self(), HOST_VM_INFO64, (host_info64_t)&vs, &count) !=
        KERN_SUCCESS) {
        return lares_fail(err, LARES_EIO, "host_statistics64 failed");
    }
    vm_size_t page = 0;
    host_page_size(mach_host_self(), &page);
    uint64_t avail = ((uint64_t)vs.free_count + vs.inactive_count + vs.purgeable_count) * page;
    struct xsw_usage sw;
    n = sizeof sw;
    d->swap_avail_bytes = sysctlbyname("vm.swapusage", &sw, &n, NULL, 0) == 0 ? sw.xsu_avail : 0;
    d->ram_total_bytes = total;
    d->ram_avail_bytes = avail < total ? avail : total;
    return LARES_OK;
}
#else
/* ISO C forbids an empty translation unit */
typedef int sched_profile_macos_unused;
#endif
