//! Random access into gzip: restart points taken while the archive is inflated once, and
//! reads that start inflating at the nearest point before an offset. A point is where a
//! deflate block ends: the compressed offset, the bits of its last byte already used, and
//! the 32 KiB of output before it (what the next blocks may refer back to), as zlib's
//! zran.c does. Resuming there needs `inflatePrime` and a raw `inflateSetDictionary`,
//! which flate2 does not expose: zlib.rs calls zlib's C API for them.

use std::io::Read;

mod zlib;

use zlib as z;
use zlib::{crc32, Stream};

/// The deflate window: how far back a block may refer.
pub const WINDOW: usize = 32 * 1024;

/// Output between two restart points: a read inflates at most this much before its
/// first byte. 4 MiB: an index of 32 KiB per 4 MiB (0.8 %), and a random small member
/// costs about 1.3 MiB of compressed input at a 3:1 ratio.
pub const SPAN: u64 = 4 << 20;

/// Where inflating may start again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// Compressed offset of the first byte not wholly consumed.
    pub input: u64,
    /// Uncompressed offset this point stands at.
    pub output: u64,
    /// Bits of the byte before `input` still to be used (0-7).
    pub bits: u8,
    /// The output before `output` (up to `WINDOW` bytes).
    pub window: Vec<u8>,
    /// Length and CRC-32 of the output from here to the next point (or the end): a read
    /// inflates to the end of every span it touches and checks it, because deflate data
    /// has no check of its own short of a member's end, and a damaged byte can inflate
    /// to wrong bytes without an error.
    pub span: u64,
    pub crc: u32,
}

/// The last `WINDOW` bytes of output, in order.
struct Window {
    buf: Vec<u8>,
    at: usize,
    full: bool,
}

impl Window {
    fn new() -> Window {
        Window {
            buf: vec![0; WINDOW],
            at: 0,
            full: false,
        }
    }

    fn push(&mut self, mut data: &[u8]) {
        if data.len() >= WINDOW {
            data = &data[data.len() - WINDOW..];
        }
        let first = data.len().min(WINDOW - self.at);
        self.buf[self.at..self.at + first].copy_from_slice(&data[..first]);
        self.buf[..data.len() - first].copy_from_slice(&data[first..]);
        let end = self.at + data.len();
        self.full |= end >= WINDOW;
        self.at = end % WINDOW;
    }

    fn snapshot(&self) -> Vec<u8> {
        if self.full {
            [&self.buf[self.at..], &self.buf[..self.at]].concat()
        } else {
            self.buf[..self.at].to_vec()
        }
    }
}

/// Inflates a gzip stream read from `src` (members one after another, as pigz and bgzip
/// write them) and takes a restart point every `SPAN` of output.
pub struct Indexer<R: Read> {
    src: R,
    s: Stream,
    input: Vec<u8>,
    /// `input[from..to]` is not yet consumed.
    from: usize,
    to: usize,
    /// Compressed bytes consumed and uncompressed bytes produced, from the start.
    total_in: u64,
    total_out: u64,
    window: Window,
    points: Vec<Point>,
    /// CRC-32 of the output since the last point.
    crc: u32,
    done: bool,
}

impl<R: Read> Indexer<R> {
    pub fn new(src: R) -> std::io::Result<Indexer<R>> {
        Ok(Indexer {
            src,
            s: Stream::new(15 + 32)?,
            input: vec![0; 256 * 1024],
            from: 0,
            to: 0,
            total_in: 0,
            total_out: 0,
            window: Window::new(),
            points: Vec::new(),
            crc: 0,
            done: false,
        })
    }

    /// The restart points, once the stream is read to its end (the last one's span
    /// ends there).
    pub fn into_points(mut self) -> std::io::Result<Vec<Point>> {
        std::io::copy(&mut self, &mut std::io::sink())?;
        self.close_span();
        Ok(self.points)
    }

    fn close_span(&mut self) {
        if let Some(p) = self.points.last_mut() {
            p.span = self.total_out - p.output;
            p.crc = self.crc;
        }
        self.crc = 0;
    }

    fn fill(&mut self) -> std::io::Result<usize> {
        self.from = 0;
        self.to = self.src.read(&mut self.input)?;
        Ok(self.to)
    }

    /// At the end of a gzip member: another follows, or the stream ends (zero padding
    /// after the last member, as some writers leave, ends it too).
    fn next_member(&mut self) -> std::io::Result<()> {
        if self.from == self.to && self.fill()? == 0 {
            self.done = true;
            return Ok(());
        }
        if self.input[self.from] != 0x1f {
            self.done = true;
            return Ok(());
        }
        if self.s.reset() != z::Z_OK {
            return Err(self.s.error("inflateReset", 0));
        }
        Ok(())
    }

    fn maybe_point(&mut self) {
        let dt = self.s.data_type();
        let at_block_end = dt & 128 != 0 && dt & 64 == 0;
        let last = self.points.last().map(|p| p.output);
        let due = last.is_none_or(|l| self.total_out - l >= SPAN);
        if at_block_end && due {
            self.close_span();
            self.points.push(Point {
                input: self.total_in,
                output: self.total_out,
                bits: (dt & 7) as u8,
                window: self.window.snapshot(),
                span: 0,
                crc: 0,
            });
        }
    }
}

impl<R: Read> Read for Indexer<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while !self.done && !out.is_empty() {
            if self.from == self.to && self.fill()? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "gzip data ends before its stream does (truncated archive)",
                ));
            }
            let (r, used, made) = self
                .s
                .inflate(&self.input[self.from..self.to], out, z::Z_BLOCK);
            self.from += used;
            self.total_in += used as u64;
            self.total_out += made as u64;
            self.window.push(&out[..made]);
            self.crc = crc32(self.crc, &out[..made]);
            match r {
                z::Z_STREAM_END => self.next_member()?,
                z::Z_OK | z::Z_BUF_ERROR => self.maybe_point(),
                _ => return Err(self.s.error("corrupt gzip data", r)),
            }
            if made > 0 {
                return Ok(made);
            }
        }
        Ok(0)
    }
}

/// Inflates from `points[0]`, given the compressed bytes `data` that start at the byte
/// before its `input` when its `bits` is not 0 (else at `input`), and returns the output
/// `[skip, skip + len)` counted from that point. Every span the range touches is inflated
/// to its end and checked against its CRC: wrong data is an error, never wrong bytes.
pub fn inflate_from(
    points: &[Point],
    data: &[u8],
    skip: u64,
    len: usize,
) -> std::io::Result<Vec<u8>> {
    let point = &points[0];
    let mut s = Stream::new(-15)?;
    let mut data = data;
    if point.bits != 0 {
        let Some((&b, rest)) = data.split_first() else {
            return Err(short());
        };
        if s.prime(point.bits, b >> (8 - point.bits)) != z::Z_OK {
            return Err(s.error("inflatePrime", 0));
        }
        data = rest;
    }
    if !point.window.is_empty() && s.set_dictionary(&point.window) != z::Z_OK {
        return Err(s.error("inflateSetDictionary", 0));
    }
    let mut out = Vec::with_capacity(len);
    let mut check = Spans::new(points);
    let mut scratch = vec![0u8; 256 * 1024];
    let mut raw = true;
    // Until the read's bytes are out and the span they end in is checked.
    while out.len() < len || !check.at_boundary() {
        let room = check.left().min(scratch.len() as u64) as usize;
        if room == 0 {
            return Err(corrupt("no restart span covers the read"));
        }
        let (r, used, made) = s.inflate(data, &mut scratch[..room], z::Z_NO_FLUSH);
        data = &data[used..];
        keep(&scratch[..made], check.pos, skip, len, &mut out);
        check.add(&scratch[..made])?;
        match r {
            z::Z_STREAM_END => {
                // A member ends: skip the raw stream's trailer (CRC, size), then read the
                // next member's header with a gzip stream.
                if raw {
                    data = data.get(8..).unwrap_or(&[]);
                }
                if data.first() != Some(&0x1f) {
                    break;
                }
                s = Stream::new(15 + 32)?;
                raw = false;
            }
            z::Z_OK => {}
            z::Z_BUF_ERROR if used == 0 && made == 0 => return Err(short()),
            z::Z_BUF_ERROR => {}
            _ => return Err(s.error("corrupt gzip data", r)),
        }
    }
    if out.len() < len || !check.at_boundary() {
        return Err(short());
    }
    Ok(out)
}

fn corrupt(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

fn short() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "gzip data ends before the member does",
    )
}

/// The spans a read passes, each checked against its CRC as its end is reached.
struct Spans<'a> {
    points: &'a [Point],
    i: usize,
    /// Output from the first point.
    pos: u64,
    in_span: u64,
    crc: u32,
}

impl<'a> Spans<'a> {
    fn new(points: &'a [Point]) -> Spans<'a> {
        Spans {
            points,
            i: 0,
            pos: 0,
            in_span: 0,
            crc: 0,
        }
    }

    /// Output still to come in the current span.
    fn left(&self) -> u64 {
        self.points.get(self.i).map_or(0, |p| p.span - self.in_span)
    }

    fn at_boundary(&self) -> bool {
        self.in_span == 0
    }

    fn add(&mut self, made: &[u8]) -> std::io::Result<()> {
        self.pos += made.len() as u64;
        self.in_span += made.len() as u64;
        self.crc = crc32(self.crc, made);
        let p = &self.points[self.i];
        if self.in_span == p.span {
            if self.crc != p.crc {
                return Err(corrupt(
                    "corrupt gzip data: a span's CRC-32 does not match the index",
                ));
            }
            (self.i, self.in_span, self.crc) = (self.i + 1, 0, 0);
        }
        Ok(())
    }
}

/// Appends to `out` what of `made` (the output at `pos`) lies in `[skip, skip + len)`.
fn keep(made: &[u8], pos: u64, skip: u64, len: usize, out: &mut Vec<u8>) {
    let end = pos + made.len() as u64;
    if end <= skip {
        return;
    }
    let a = skip.saturating_sub(pos) as usize;
    let b = made.len().min(a + (len - out.len()));
    out.extend_from_slice(&made[a..b]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn data(len: usize) -> Vec<u8> {
        let mut x = 7u64;
        (0..len)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                b"ACGTN\n"[((x >> 33) % 6) as usize]
            })
            .collect()
    }

    fn index(z: &[u8]) -> Vec<Point> {
        let mut ix = Indexer::new(z).unwrap();
        std::io::copy(&mut ix, &mut std::io::sink()).unwrap();
        ix.into_points().unwrap()
    }

    fn read(
        points: &[Point],
        z: &[u8],
        i: usize,
        skip: u64,
        len: usize,
    ) -> std::io::Result<Vec<u8>> {
        let p = &points[i];
        let from = (p.input - u64::from(p.bits != 0)) as usize;
        inflate_from(&points[i..], &z[from..], skip, len)
    }

    #[test]
    fn every_span_reads_back_from_its_point() {
        let d = data(4 * SPAN as usize + 999);
        let z = gz(&d);
        let points = index(&z);
        assert!(points.len() >= 4, "{}", points.len());
        assert_eq!(points.iter().map(|p| p.span).sum::<u64>(), d.len() as u64);
        for (i, p) in points.iter().enumerate() {
            let o = p.output as usize;
            let got = read(&points, &z, i, 100, 5000).unwrap();
            assert_eq!(got, &d[o + 100..o + 5100]);
        }
    }

    #[test]
    fn a_damaged_span_is_an_error_never_other_bytes() {
        let d = data(4 * SPAN as usize);
        let z = gz(&d);
        let points = index(&z);
        assert!(points.len() >= 3, "{}", points.len());
        let p = &points[1];
        // Flip bits well inside the span after point 1, then read its first bytes.
        let mut bad = z.clone();
        let at = (p.input + (points[2].input - p.input) / 2) as usize;
        for b in &mut bad[at..at + 64] {
            *b ^= 0x24;
        }
        let e = read(&points, &bad, 1, 0, 10).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
        // The span before it still reads.
        let o = points[0].output as usize;
        assert_eq!(read(&points, &bad, 0, 0, 10).unwrap(), &d[o..o + 10]);
    }

    #[test]
    fn a_stream_of_several_members_reads_across_their_joins() {
        let d = data(SPAN as usize * 3);
        let third = d.len() / 3;
        let z = [
            gz(&d[..third]),
            gz(&d[third..2 * third]),
            gz(&d[2 * third..]),
        ]
        .concat();
        let points = index(&z);
        assert_eq!(points.iter().map(|p| p.span).sum::<u64>(), d.len() as u64);
        let i = points.partition_point(|p| p.output <= third as u64 - 10) - 1;
        let skip = third as u64 - 10 - points[i].output;
        assert_eq!(
            read(&points, &z, i, skip, 20).unwrap(),
            &d[third - 10..third + 10]
        );
    }
}
