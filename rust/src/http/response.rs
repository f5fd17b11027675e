//! The response side: a response head written as uvicorn's HTTP protocols write it (names
//! lowercased, `connection: close` added when the connection ends, chunked transfer when
//! the app gives no length), with the same checks on what an application hands over.

/// Why an application's header was refused; the text is uvicorn's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadError {
    Name,
    Value,
    /// A `content-length` that is not a decimal number.
    Length,
}

impl HeadError {
    pub fn message(&self) -> &'static str {
        match self {
            HeadError::Name => "Invalid HTTP header name.",
            HeadError::Value => "Invalid HTTP header value.",
            HeadError::Length => "invalid content-length value",
        }
    }
}

/// How the body that follows the head is framed, and whether the connection stays open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    pub chunked: bool,
    /// Body bytes the head promised (`content-length`); 0 when chunked or absent.
    pub content_length: u64,
    pub keep_alive: bool,
}

/// Writes one response head into a buffer.
pub struct HeadWriter<'a> {
    out: &'a mut Vec<u8>,
    chunked: Option<bool>,
    content_length: u64,
    keep_alive: bool,
    has_close: bool,
}

impl<'a> HeadWriter<'a> {
    /// Starts a head with its status line (`HTTP/1.1 200 OK\r\n`).
    pub fn new(out: &'a mut Vec<u8>, status_line: &[u8], keep_alive: bool) -> Self {
        out.extend_from_slice(status_line);
        HeadWriter {
            out,
            chunked: None,
            content_length: 0,
            keep_alive,
            has_close: false,
        }
    }

    /// One header line, name lowercased; what it says about framing is noted. A
    /// `content-length` must be plain digits (see [`HeadWriter::header_with_length`]).
    pub fn header(&mut self, name: &[u8], value: &[u8]) -> Result<(), HeadError> {
        self.header_with_length(name, value, None)
    }

    /// [`HeadWriter::header`], with the number a `content-length` value stands for when
    /// the caller read it (as Python's `int()` reads it, for one).
    pub fn header_with_length(
        &mut self,
        name: &[u8],
        value: &[u8],
        length: Option<u64>,
    ) -> Result<(), HeadError> {
        let framing = self.line(name, value)?;
        match framing {
            Framed::Length => {
                if self.chunked.is_none() {
                    self.content_length =
                        length.or_else(|| decimal(value)).ok_or(HeadError::Length)?;
                    self.chunked = Some(false);
                }
            }
            Framed::Chunked => {
                if value.eq_ignore_ascii_case(b"chunked") {
                    self.content_length = 0;
                    self.chunked = Some(true);
                }
            }
            Framed::Connection => {
                if value
                    .split(|&b| b == b',')
                    .any(|t| trim(t).eq_ignore_ascii_case(b"close"))
                {
                    self.keep_alive = false;
                    self.has_close = true;
                }
            }
            Framed::No => {}
        }
        Ok(())
    }

    /// Writes `name: value` (name lowercased) after checking both; says whether the
    /// name is one that frames the body or the connection.
    fn line(&mut self, name: &[u8], value: &[u8]) -> Result<Framed, HeadError> {
        let start = self.out.len();
        self.out.reserve(name.len() + value.len() + 4);
        let mut bad = 0u8;
        for &b in name {
            bad |= BYTE_CLASS[usize::from(b)] & BAD_NAME;
            self.out.push(b.to_ascii_lowercase());
        }
        if bad != 0 {
            self.out.truncate(start);
            return Err(HeadError::Name);
        }
        if value
            .iter()
            .any(|&b| BYTE_CLASS[usize::from(b)] & BAD_VALUE != 0)
        {
            self.out.truncate(start);
            return Err(HeadError::Value);
        }
        let framed = match &self.out[start..] {
            b"content-length" => Framed::Length,
            b"transfer-encoding" => Framed::Chunked,
            b"connection" => Framed::Connection,
            _ => Framed::No,
        };
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value);
        self.out.extend_from_slice(b"\r\n");
        Ok(framed)
    }

    /// Header lines already checked and lowercased (written before by
    /// [`HeadWriter::plain_lines`]), none of them framing the body or the connection.
    pub fn raw(&mut self, lines: &[u8]) {
        self.out.extend_from_slice(lines);
    }

    /// Ends the head. A response to HEAD, a 204 and a 304 have no body to frame; any other
    /// without a length is sent chunked.
    pub fn finish(self, is_head: bool, status: u16) -> Framing {
        if !self.keep_alive && !self.has_close {
            self.out.extend_from_slice(b"connection: close\r\n");
        }
        let chunked = match self.chunked {
            Some(chunked) => chunked,
            None if !is_head && status != 204 && status != 304 => {
                self.out
                    .extend_from_slice(b"transfer-encoding: chunked\r\n");
                true
            }
            None => false,
        };
        self.out.extend_from_slice(b"\r\n");
        Framing {
            chunked,
            content_length: self.content_length,
            keep_alive: self.keep_alive,
        }
    }
}

/// Whether a header name frames the body or the connection.
enum Framed {
    Length,
    Chunked,
    Connection,
    No,
}

/// `header lines` for `(name, value)` pairs that frame nothing, checked and lowercased as
/// [`HeadWriter::header`] writes them; `None` if one is refused or frames the body or
/// the connection (those go through `header`).
pub fn plain_lines<'a>(pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut writer = HeadWriter {
        out: &mut out,
        chunked: None,
        content_length: 0,
        keep_alive: true,
        has_close: false,
    };
    for (name, value) in pairs {
        if !matches!(writer.line(name, value), Ok(Framed::No)) {
            return None;
        }
    }
    Some(out)
}

const BAD_NAME: u8 = 1;
const BAD_VALUE: u8 = 2;

/// Per byte: `BAD_NAME` for uvicorn's `HEADER_RE` (control bytes, space, tab and the
/// separators), `BAD_VALUE` for its `HEADER_VALUE_RE` (control bytes but tab).
static BYTE_CLASS: [u8; 256] = byte_classes();

const fn byte_classes() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let byte = b as u8;
        if byte < 0x20 || byte == 0x7f {
            table[b] |= BAD_NAME;
            if byte != b'\t' {
                table[b] |= BAD_VALUE;
            }
        }
        b += 1;
    }
    let separators = b" ()<>@,;:[]={}\\\"";
    let mut i = 0;
    while i < separators.len() {
        table[separators[i] as usize] |= BAD_NAME;
        i += 1;
    }
    table
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Plain ASCII digits, blanks around allowed: what every `content-length` an application
/// sends looks like (anything else is for the caller to read).
pub fn decimal(value: &[u8]) -> Option<u64> {
    let s = value.trim_ascii();
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |n, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// A chunk of a chunked body: its size line, the data, CRLF (nothing for an empty one),
/// and the last chunk when the body ends.
pub fn write_chunk(out: &mut Vec<u8>, data: &[u8], last: bool) {
    if !data.is_empty() {
        use std::io::Write;
        let _ = write!(out, "{:x}\r\n", data.len());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
    if last {
        out.extend_from_slice(b"0\r\n\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(
        headers: &[(&[u8], &[u8])],
        keep_alive: bool,
        is_head: bool,
        status: u16,
    ) -> (Vec<u8>, Framing) {
        let mut out = Vec::new();
        let mut writer = HeadWriter::new(&mut out, b"HTTP/1.1 200 OK\r\n", keep_alive);
        for (n, v) in headers {
            writer.header(n, v).unwrap();
        }
        let framing = writer.finish(is_head, status);
        (out, framing)
    }

    #[test]
    fn framing_as_uvicorn() {
        let (out, f) = head(
            &[(b"Content-Type", b"text/plain"), (b"Content-Length", b"5")],
            true,
            false,
            200,
        );
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\n"
        );
        assert_eq!(
            f,
            Framing {
                chunked: false,
                content_length: 5,
                keep_alive: true
            }
        );
        let (out, f) = head(&[], false, false, 200);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        assert!(f.chunked && !f.keep_alive);
        let (out, f) = head(&[(b"connection", b"Keep-Alive, CLOSE")], true, true, 200);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nconnection: Keep-Alive, CLOSE\r\n\r\n"
        );
        assert!(!f.chunked && !f.keep_alive);
        let (_, f) = head(&[], true, false, 204);
        assert!(!f.chunked);
        // A length after chunked is ignored, as uvicorn ignores it.
        let (_, f) = head(
            &[
                (b"transfer-encoding", b"chunked"),
                (b"content-length", b"3"),
            ],
            true,
            false,
            200,
        );
        assert_eq!(
            f,
            Framing {
                chunked: true,
                content_length: 0,
                keep_alive: true
            }
        );
    }

    #[test]
    fn what_an_app_may_not_send() {
        let mut out = Vec::new();
        let mut w = HeadWriter::new(&mut out, b"", true);
        assert_eq!(w.header(b"a b", b"v"), Err(HeadError::Name));
        assert_eq!(w.header(b"a:", b"v"), Err(HeadError::Name));
        assert_eq!(w.header(b"a", b"v\r\nx: y"), Err(HeadError::Value));
        assert_eq!(w.header(b"a", b"v\x00"), Err(HeadError::Value));
        assert_eq!(w.header(b"content-length", b"x"), Err(HeadError::Length));
        assert_eq!(w.header(b"a", b"tab\tok"), Ok(()));
    }

    #[test]
    fn decimal_digits_only() {
        assert_eq!(decimal(b" 12 "), Some(12));
        assert_eq!(decimal(b"+1_000"), None);
        assert_eq!(decimal(b"-1"), None);
        assert_eq!(decimal(b""), None);
    }

    #[test]
    fn chunks() {
        let mut out = Vec::new();
        write_chunk(&mut out, b"hello world, 17b", false);
        write_chunk(&mut out, b"", true);
        assert_eq!(out, b"10\r\nhello world, 17b\r\n0\r\n\r\n");
    }
}
