//! zlib's C API, the project's one use of it (zlib-rs's, libz-rs-sys): an inflate stream
//! with the calls flate2 does not expose (`inflatePrime`, a dictionary on a raw stream),
//! and zlib's CRC-32. Every `unsafe` of the gzip reader is in this file.

use std::os::raw::{c_int, c_uint, c_ulong};

use libz_rs_sys as z;

pub(super) use z::{Z_BLOCK, Z_BUF_ERROR, Z_NO_FLUSH, Z_OK, Z_STREAM_END};

/// A zlib inflate stream; boxed because zlib keeps a pointer to it.
pub(super) struct Stream(Box<z::z_stream>);

impl Stream {
    /// `bits`: 15 + 32 reads a gzip or zlib header; -15 raw deflate.
    pub(super) fn new(bits: c_int) -> std::io::Result<Stream> {
        let mut s = Box::new(z::z_stream::default());
        let size = std::mem::size_of::<z::z_stream>() as c_int;
        // SAFETY: a fresh stream (no allocators: zlib-rs's own), the library's own version
        // string and the stream's size.
        let r = unsafe { z::inflateInit2_(&mut *s, bits, z::zlibVersion(), size) };
        if r != z::Z_OK {
            return Err(std::io::Error::other(format!("inflateInit2 failed ({r})")));
        }
        Ok(Stream(s))
    }

    /// One inflate call from `input` into `output`; returns zlib's code, bytes used,
    /// bytes produced.
    pub(super) fn inflate(
        &mut self,
        input: &[u8],
        output: &mut [u8],
        flush: c_int,
    ) -> (c_int, usize, usize) {
        let s = &mut *self.0;
        s.next_in = input.as_ptr();
        s.avail_in = input.len().min(c_uint::MAX as usize) as c_uint;
        s.next_out = output.as_mut_ptr();
        s.avail_out = output.len().min(c_uint::MAX as usize) as c_uint;
        let (ai, ao) = (s.avail_in, s.avail_out);
        // SAFETY: next_in/next_out point into slices alive for this call.
        let r = unsafe { z::inflate(s, flush) };
        let used = (ai - s.avail_in) as usize;
        let made = (ao - s.avail_out) as usize;
        s.next_in = std::ptr::null_mut();
        s.next_out = std::ptr::null_mut();
        (r, used, made)
    }

    pub(super) fn data_type(&self) -> c_int {
        self.0.data_type
    }

    pub(super) fn reset(&mut self) -> c_int {
        // SAFETY: an initialised stream.
        unsafe { z::inflateReset(&mut *self.0) }
    }

    pub(super) fn prime(&mut self, bits: u8, value: u8) -> c_int {
        // SAFETY: an initialised stream.
        unsafe { z::inflatePrime(&mut *self.0, c_int::from(bits), c_int::from(value)) }
    }

    pub(super) fn set_dictionary(&mut self, dict: &[u8]) -> c_int {
        // SAFETY: dict is a live slice; zlib copies it.
        unsafe { z::inflateSetDictionary(&mut *self.0, dict.as_ptr(), dict.len() as c_uint) }
    }

    pub(super) fn error(&self, what: &str, code: c_int) -> std::io::Error {
        let msg = if self.0.msg.is_null() {
            format!("code {code}")
        } else {
            // SAFETY: zlib's msg is a NUL-terminated static string.
            unsafe { std::ffi::CStr::from_ptr(self.0.msg) }
                .to_string_lossy()
                .into_owned()
        };
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{what}: {msg}"))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: an initialised stream, ended once.
        unsafe { z::inflateEnd(&mut *self.0) };
    }
}

/// CRC-32 of `data` continuing `crc` (zlib's).
pub(super) fn crc32(crc: u32, data: &[u8]) -> u32 {
    data.chunks(1 << 30).fold(crc, |c, d| {
        // SAFETY: a live slice.
        unsafe { z::crc32(c_ulong::from(c), d.as_ptr(), d.len() as c_uint) as u32 }
    })
}
