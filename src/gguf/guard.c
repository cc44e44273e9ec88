/*
 * The mapping guard: a model file that shrinks (or whose disk fails) while it
 * is mapped must not kill the process. Reading a mapped page past the new end
 * of the file, or a page the disk cannot deliver, raises SIGBUS; its default
 * action ends the process, a worker or a server with every other client.
 *
 * gguf_open checks every tensor span against the file's size, so a file that is
 * already short is refused with a clear error. For a file that changes later,
 * each mapping is registered here, and one process-wide SIGBUS handler, when
 * the faulting address lies in a registered mapping, maps anonymous zero pages
 * over the rest of that mapping (from the faulting page to its end), counts the
 * fault and returns: the interrupted load reads zeros and the computation goes
 * on to its next check (exec_local_forward, exec_local_output, gguf_open),
 * which sees gguf_damaged and fails with LARES_EIO. No long jump crosses the
 * worker pool's threads, no lock is held: every thread that touches the
 * mapping (pool, prefetch, GPU upload) is covered the same way. A fault at an
 * address outside every registered mapping goes to the handler that was there
 * before (or the default action, as if there were no guard).
 *
 * mmap is not on POSIX's list of async-signal-safe functions, but on Linux and
 * the BSDs it is a plain system call that takes no user-space lock, which is
 * what matters in a handler (the same replacement is what databases that
 * map their files do).
 */
#include "gguf/gguf.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#define GUARD_SLOTS 64

typedef struct guard_slot {
    atomic_uintptr_t lo, hi; /* [lo, hi) mapped; lo == 0: free */
    atomic_long faults;
} guard_slot;

static guard_slot slots[GUARD_SLOTS];
static struct sigaction previous;
static pthread_once_t installed = PTHREAD_ONCE_INIT;
static bool install_failed;

static void on_sigbus(int sig, siginfo_t *info, void *ctx) {
    const uintptr_t a = (uintptr_t)info->si_addr;
    for (int i = 0; i < GUARD_SLOTS; i++) {
        const uintptr_t lo = atomic_load(&slots[i].lo);
        const uintptr_t hi = atomic_load(&slots[i].hi);
        if (lo != 0 && a >= lo && a < hi) {
            const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
            const uintptr_t from = a & ~(page - 1);
            void *z = mmap((void *)from, (size_t)(hi - from), PROT_READ,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            atomic_fetch_add(&slots[i].faults, 1);
            if (z != MAP_FAILED) {
                return; /* the load runs again and reads zeros */
            }
            break;
        }
    }
    /* not ours (or no replacement): what would have happened without the guard */
    if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction != NULL) {
        previous.sa_sigaction(sig, info, ctx);
        return;
    }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN &&
        previous.sa_handler != NULL) {
        previous.sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL); /* the faulting load runs again and ends the process */
}

static void install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    install_failed = sigaction(SIGBUS, &sa, &previous) != 0;
}

int gguf_guard_add(const void *base, uint64_t bytes) {
    pthread_once(&installed, install);
    if (install_failed || base == NULL || bytes == 0) {
        return -1;
    }
    for (int i = 0; i < GUARD_SLOTS; i++) {
        uintptr_t free_lo = 0;
        /* claim the slot with a placeholder so that no other opener takes it */
        if (atomic_compare_exchange_strong(&slots[i].lo, &free_lo, (uintptr_t)1)) {
            atomic_store(&slots[i].faults, 0);
            atomic_store(&slots[i].hi, (uintptr_t)base + (uintptr_t)bytes);
            atomic_store(&slots[i].lo, (uintptr_t)base);
            return i;
        }
    }
    return -1; /* more mappings than slots: this one goes unguarded */
}

void gguf_guard_remove(int slot) {
    if (slot < 0 || slot >= GUARD_SLOTS) {
        return;
    }
    atomic_store(&slots[slot].hi, 0);
    atomic_store(&slots[slot].lo, 0);
}

long gguf_guard_faults(int slot) {
    if (slot < 0 || slot >= GUARD_SLOTS) {
        return 0;
    }
    return atomic_load(&slots[slot].faults);
}
