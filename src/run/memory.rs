//! Handing memory a cycle freed back to the system.
//!
//! A cycle's working set (policies, tag lists, the plan, the files it edits) is several times
//! what lives between cycles, and the first cycle, which proposes every pending update at once,
//! is the largest. Allocators keep freed pages mapped for reuse, so without this the resident
//! size of a process that runs for weeks stays at its first cycle's peak. Purging once after
//! each cycle costs a walk over the allocators' free lists, well under a millisecond.
//!
//! Two allocators hold the process's memory: the binary's global allocator, jemalloc
//! (`src/main.rs`; ARCHITECTURE.md says why), for everything Rust allocates, and the C
//! library's for libgit2 and OpenSSL.

/// jemalloc's `MALLCTL_ARENAS_ALL`: "every arena" in an `arena.<i>.*` control name.
#[cfg(not(target_env = "msvc"))]
const PURGE_EVERY_ARENA: &std::ffi::CStr = c"arena.4096.purge";

/// Returns the pages of freed allocations, in every arena of both allocators, to the kernel.
/// Where jemalloc is not the global allocator (the library's own tests), its purge finds
/// nothing to return.
pub fn release_freed() {
    #[cfg(not(target_env = "msvc"))]
    {
        // SAFETY: `arena.<i>.purge` reads and writes nothing: jemalloc requires every pointer
        // null and the length 0, which is what is passed; the name is a NUL-terminated
        // string that outlives the call.
        #[allow(unsafe_code)]
        let status = unsafe {
            tikv_jemalloc_sys::mallctl(
                PURGE_EVERY_ARENA.as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if status != 0 {
            tracing::debug!(status, "jemalloc refused to purge its arenas");
        }
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only walks and unmaps glibc's own free chunks under its arena
        // locks; it may be called from any thread at any time.
        #[allow(unsafe_code)]
        unsafe {
            libc::malloc_trim(0);
        }
    }
}
