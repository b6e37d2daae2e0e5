//! Cache-line prefetch hints: ask for memory a few steps before it is read, so that lookups of
//! many independent keys wait for memory together instead of one after another.

/// Asks for the cache line holding `p` to be fetched (a hint: reads nothing, faults on no
/// address, a no-op off x86-64).
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing and faults on no address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Asks for the cache line holding `*p` to be fetched (a hint).
#[inline(always)]
pub fn prefetch_ref<T>(p: &T) {
    prefetch(p as *const T);
}

/// Asks for the first `lines` cache lines of `s` (at most its length) to be fetched.
#[inline(always)]
pub fn prefetch_slice<T>(s: &[T], lines: usize) {
    let bytes = std::mem::size_of_val(s);
    let base = s.as_ptr() as *const u8;
    let mut at = 0;
    while at < bytes && at < lines * 64 {
        prefetch(base.wrapping_add(at));
        at += 64;
    }
}
