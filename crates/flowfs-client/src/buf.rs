//! Page-aligned byte buffers for downloaded ranges, reused from a pool.
//!
//! They were aligned for `O_DIRECT` writes to the disk cache, which it no longer makes
//! (the kernel reads complete cache files itself and should find them in memory); the
//! alignment costs nothing and keeps whole-page copies. The pool is what matters (below).

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use bytes::Bytes;
use parking_lot::Mutex;

/// Alignment of the start of every buffer: a page.
pub const ALIGN: usize = 4096;

/// Most bytes of freed buffers kept for reuse. A fresh allocation of part size is mapped
/// anew by the allocator and every page of it faults on first write: for a 2 GiB read
/// that was a third of flowfs's CPU. Reused buffers are already mapped.
const POOL_MAX: usize = 96 << 20;
/// Buffers at most this large come in power-of-two sizes, so that they can be reused for
/// any range that fits; larger ones are not pooled.
const POOL_CLASS_MAX: usize = 64 << 20;

struct Pool {
    /// Free buffers by capacity (a power of two).
    free: Vec<(usize, NonNull<u8>)>,
    bytes: usize,
}

// SAFETY: the pool owns the free allocations it holds; they are plain memory.
unsafe impl Send for Pool {}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: Vec::new(),
    bytes: 0,
});

fn class(n: usize) -> usize {
    let n = n.max(ALIGN);
    if n <= POOL_CLASS_MAX {
        n.next_power_of_two()
    } else {
        n.div_ceil(ALIGN) * ALIGN
    }
}

/// A page-aligned byte buffer from a bounded pool of freed ones: download pieces that can
/// be written to the cache with O_DIRECT, without faulting in fresh pages each time.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
}

// SAFETY: the buffer owns its allocation and has no interior mutability.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access is read-only (`AsRef<[u8]>`).
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// An empty buffer with room for at least `n` bytes, reused from the pool when one of
    /// its size class is free.
    pub fn with_capacity(n: usize) -> AlignedBuf {
        let cap = class(n);
        {
            let mut pool = POOL.lock();
            if let Some(i) = pool.free.iter().position(|(c, _)| *c == cap) {
                let (_, ptr) = pool.free.swap_remove(i);
                pool.bytes -= cap;
                return AlignedBuf { ptr, len: 0, cap };
            }
        }
        let layout = Self::layout(cap);
        // SAFETY: the layout has a non-zero size.
        // Zeroed, so that `fill` can hand out the free space as an initialised slice.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout);
        };
        AlignedBuf { ptr, len: 0, cap }
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::with_capacity(data.len());
        b.extend_from_slice(data);
        b
    }

    fn layout(cap: usize) -> Layout {
        Layout::from_size_align(cap, ALIGN).unwrap_or_else(|_| {
            // Only reachable for sizes near usize::MAX, which no range ever has.
            alloc::handle_alloc_error(Layout::new::<[u8; ALIGN]>())
        })
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been written yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes that can still be appended (at least what `with_capacity` was asked for).
    pub fn remaining(&self) -> usize {
        self.cap - self.len
    }

    /// Appends as much of `data` as fits; returns how much did.
    pub fn extend_from_slice(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.remaining());
        // SAFETY: `n` bytes fit after `len` in our allocation; the source cannot overlap it.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(self.len), n);
        }
        self.len += n;
        n
    }

    /// Appends up to `n` bytes written by `fill` into the free space (which it gets
    /// as a slice of that length); `fill` returns how many it wrote.
    pub fn fill<E>(
        &mut self,
        n: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        let n = n.min(self.remaining());
        // SAFETY: `n` bytes after `len` are inside our allocation (zeroed when made), which
        // nothing else references; old bytes of a reused buffer there are overwritten or
        // stay invisible: only what `fill` reports written counts.
        let free = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(self.len), n) };
        let wrote = fill(free)?.min(n);
        self.len += wrote;
        Ok(wrote)
    }

    /// Hands the buffer over as `Bytes` without a copy; it goes back to the pool when the
    /// last clone is dropped.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the first `len` bytes were written by `extend_from_slice`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.cap <= POOL_CLASS_MAX {
            let mut pool = POOL.lock();
            if pool.bytes + self.cap <= POOL_MAX {
                pool.bytes += self.cap;
                pool.free.push((self.cap, self.ptr));
                return;
            }
        }
        // SAFETY: allocated in `with_capacity` with this very layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.cap)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_bounded() {
        let mut b = AlignedBuf::with_capacity(5000);
        assert_eq!(b.remaining(), 8192);
        assert_eq!(AlignedBuf::with_capacity(1 << 20).remaining(), 1 << 20);
        assert_eq!(
            AlignedBuf::with_capacity((1 << 20) + 1).remaining(),
            2 << 20
        );
        assert_eq!(b.extend_from_slice(&[7u8; 6000]), 6000);
        assert_eq!(b.extend_from_slice(&[9u8; 6000]), 2192);
        let bytes = b.into_bytes();
        assert_eq!(bytes.as_ptr() as usize % ALIGN, 0);
        assert_eq!(bytes.len(), 8192);
        assert_eq!(&bytes[5998..6002], &[7, 7, 9, 9]);
        let s = AlignedBuf::from_slice(b"abc").into_bytes();
        assert_eq!(&s[..], b"abc");
        assert_eq!(s.slice(1..).as_ref(), b"bc");
    }
}

#[cfg(test)]
mod pool_tests {
    use super::*;

    #[test]
    fn a_freed_buffer_is_reused_with_its_pages() {
        // A size no other test uses, so that parallel tests do not take it meanwhile.
        let n = (3 << 20) + 12345;
        let mut a = AlignedBuf::with_capacity(n);
        a.extend_from_slice(&[5u8; 100]);
        let p = a.as_ref().as_ptr();
        drop(a.into_bytes());
        let mut b = AlignedBuf::with_capacity(n - 1000);
        assert_eq!(b.as_ref().as_ptr(), p, "the freed buffer came back");
        assert!(b.is_empty(), "a reused buffer starts empty");
        assert_eq!(b.extend_from_slice(&[1u8; 10]), 10);
        assert_eq!(b.as_ref(), &[1u8; 10]);
        let r: Result<usize, ()> = b.fill(1 << 30, |free| {
            assert_eq!(free.len(), (4 << 20) - 10, "no more than the free space");
            free[..3].copy_from_slice(b"xyz");
            Ok(3)
        });
        assert_eq!(r, Ok(3));
        assert_eq!(&b.as_ref()[8..], &[1, 1, b'x', b'y', b'z']);
    }
}
