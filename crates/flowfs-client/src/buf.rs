//! Page-aligned byte buffers for downloaded ranges.
//!
//! A body collected into one of these can be written to the disk cache with `O_DIRECT`,
//! which skips the page cache: on small VMs, filling page-cache pages costs more CPU than
//! the whole download (see docs/BENCHMARKS.md).

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use bytes::Bytes;

/// Alignment of the start of every buffer, enough for `O_DIRECT` on Linux file systems.
pub const ALIGN: usize = 4096;

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
    pub fn with_capacity(n: usize) -> AlignedBuf {
        let cap = n.max(1).div_ceil(ALIGN) * ALIGN;
        let layout = Self::layout(cap);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout);
        };
        AlignedBuf { ptr, len: 0, cap }
    }

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

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

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
