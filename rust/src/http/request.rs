//! The request side: heads through `httparse`, then the framing of RFC 9112 section 6
//! applied strictly. A request that two readers could frame differently (request
//! smuggling) is refused, never guessed at: Content-Length beside Transfer-Encoding, two
//! Content-Lengths, a transfer coding other than a final `chunked`, a bare LF, an
//! obs-fold, a malformed chunk size.
//!
//! The parser keeps only what it has not consumed. A head split across reads is scanned
//! once, byte by byte, for its end (and for bare line ends); `httparse` runs once the end
//! has come. The head's size is bounded while it is incomplete, as h11 bounds it (uvicorn's
//! `h11_max_incomplete_event_size`): a whole head in one read is not refused for its size.

use std::fmt;

/// How many header lines the first parse of a head makes room for; a head with more is
/// parsed again with room for as many as it has lines.
const HEADERS_FIRST_TRY: usize = 64;
/// How many bytes of an incomplete request line are checked for a method.
const METHOD_CHECKED: usize = 32;
/// A chunk-size line (size and extensions) longer than this is refused.
const MAX_CHUNK_LINE: usize = 4096;

/// Why a request was refused. The message is what the 400 response and the log say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The head grew past the limit before it ended.
    HeadTooLarge,
    /// Anything else: malformed or ambiguous.
    Invalid(&'static str),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::HeadTooLarge => f.write_str("request head too large"),
            ParseError::Invalid(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ParseError {}

/// A request head as parsed, borrowed from the input.
pub struct Head<'a> {
    pub method: &'a str,
    /// The request target as sent.
    pub target: &'a [u8],
    /// The path of the target (origin form, or the path of an absolute-form target).
    pub path: &'a [u8],
    /// What follows `?`, without the fragment (empty when there is none).
    pub query: &'a [u8],
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Names as sent (callers lowercase them).
    pub headers: &'a [httparse::Header<'a>],
    /// HTTP/1.1 without `Connection: close`.
    pub keep_alive: bool,
    /// `Expect: 100-continue`.
    pub expect_continue: bool,
    /// The `Upgrade` header's value, when `Connection` names `upgrade`.
    pub upgrade: Option<&'a [u8]>,
}

/// Where the parser's output goes. The parser calls these in the order of the stream.
pub trait Sink {
    /// A request head. Returning `true` hands the rest of the connection over (a protocol
    /// upgrade): the parser stops and passes every later byte to [`Sink::upgraded`].
    fn head(&mut self, head: &Head<'_>) -> bool;
    /// A piece of the request body, de-chunked.
    fn body(&mut self, chunk: &[u8]);
    /// The request ended.
    fn complete(&mut self);
    /// Bytes after the head of a request whose connection was handed over.
    fn upgraded(&mut self, rest: &[u8]);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    /// Bytes of a Content-Length body still to come.
    Body(u64),
    ChunkSize,
    /// Bytes of the current chunk still to come.
    ChunkData(u64),
    /// The CRLF after a chunk's data.
    ChunkEnd,
    Trailers,
    /// The request asked to close the connection: what follows is not read.
    Closed,
    Upgraded,
    Failed,
}

/// An HTTP/1.x request parser: feed it reads, it calls a [`Sink`].
pub struct RequestParser {
    state: State,
    /// Unconsumed bytes: a head, chunk line or trailer not yet whole.
    buf: Vec<u8>,
    max_head: usize,
    /// Trailer bytes read for the current request (bounded by `max_head`).
    trailer_bytes: usize,
    /// Bytes of the head being read (from its start) already scanned without finding its
    /// end.
    scanned: usize,
    /// Bytes of the head being read made of whole lines already found well formed (a head
    /// that cannot become valid is refused before it ends: a TLS hello sent to a plain
    /// port gets its 400 at once).
    lines_checked: usize,
    /// Whether the request being read keeps the connection open after it.
    keep_alive: bool,
    error: Option<ParseError>,
}

impl RequestParser {
    /// `max_head`: the most bytes a request head (or a request's trailers) may take.
    pub fn new(max_head: usize) -> Self {
        RequestParser {
            state: State::Head,
            buf: Vec::new(),
            max_head: max_head.max(1),
            trailer_bytes: 0,
            scanned: 0,
            lines_checked: 0,
            keep_alive: true,
            error: None,
        }
    }

    /// Bytes held for a head or line not yet whole.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// True between requests, with nothing of the next one read.
    pub fn is_idle(&self) -> bool {
        self.state == State::Head && self.buf.is_empty()
    }

    /// Parses `data`. After an error every later call returns the same error.
    pub fn feed<S: Sink>(&mut self, data: &[u8], sink: &mut S) -> Result<(), ParseError> {
        if let Some(err) = &self.error {
            return Err(err.clone());
        }
        let result = if self.buf.is_empty() {
            self.run(data, sink).map(|used| {
                if used < data.len() {
                    self.buf.extend_from_slice(&data[used..]);
                }
            })
        } else {
            let mut buf = std::mem::take(&mut self.buf);
            buf.extend_from_slice(data);
            let result = self.run(&buf, sink);
            if let Ok(used) = result {
                buf.drain(..used);
                self.buf = buf;
            }
            result.map(|_| ())
        };
        if let Err(err) = &result {
            self.state = State::Failed;
            self.buf = Vec::new();
            self.error = Some(err.clone());
        }
        result
    }

    /// Consumes as much of `input` as can be parsed; returns how much.
    fn run<S: Sink>(&mut self, input: &[u8], sink: &mut S) -> Result<usize, ParseError> {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            match self.state {
                State::Head => {
                    // Empty lines before a request line are skipped (RFC 9112 2.2), as
                    // they come: a flood of them costs no buffer.
                    if self.scanned == 0 && rest.starts_with(b"\r\n") {
                        pos += 2;
                        continue;
                    }
                    if rest.is_empty() || rest == b"\r" {
                        return Ok(pos);
                    }
                    match self.head(rest, sink)? {
                        Some(used) => pos += used,
                        None => return Ok(pos),
                    }
                }
                State::Body(left) => {
                    if rest.is_empty() {
                        return Ok(pos);
                    }
                    let (took, left) = pass_body(rest, left, sink);
                    pos += took;
                    if left == 0 {
                        self.finish(sink);
                    } else {
                        self.state = State::Body(left);
                    }
                }
                State::ChunkSize => {
                    let Some(line) = line_at(rest, MAX_CHUNK_LINE)? else {
                        return Ok(pos);
                    };
                    let size = chunk_size(&rest[..line])?;
                    pos += line + 2;
                    self.state = if size == 0 {
                        self.trailer_bytes = 0;
                        State::Trailers
                    } else {
                        State::ChunkData(size)
                    };
                }
                State::ChunkData(left) => {
                    if rest.is_empty() {
                        return Ok(pos);
                    }
                    let (took, left) = pass_body(rest, left, sink);
                    pos += took;
                    self.state = if left == 0 {
                        State::ChunkEnd
                    } else {
                        State::ChunkData(left)
                    };
                }
                State::ChunkEnd => {
                    if rest.len() < 2 {
                        if rest.first().is_some_and(|&b| b != b'\r') {
                            return Err(ParseError::Invalid("chunk data not followed by CRLF"));
                        }
                        return Ok(pos);
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(ParseError::Invalid("chunk data not followed by CRLF"));
                    }
                    pos += 2;
                    self.state = State::ChunkSize;
                }
                State::Trailers => {
                    let room = self.max_head.saturating_sub(self.trailer_bytes);
                    let line = line_at(rest, room).map_err(|err| match err {
                        ParseError::Invalid(LINE_TOO_LONG) => ParseError::HeadTooLarge,
                        other => other,
                    })?;
                    let Some(line) = line else {
                        return Ok(pos);
                    };
                    pos += line + 2;
                    self.trailer_bytes += line + 2;
                    if line == 0 {
                        self.finish(sink);
                    } else {
                        trailer_line(&rest[..line])?;
                    }
                }
                State::Closed => return Ok(input.len()),
                State::Upgraded => {
                    if !rest.is_empty() {
                        sink.upgraded(rest);
                    }
                    return Ok(input.len());
                }
                State::Failed => unreachable!("feed returns before running a failed parser"),
            }
        }
    }

    /// The request ended: ready for the next one, or done reading.
    fn finish<S: Sink>(&mut self, sink: &mut S) {
        sink.complete();
        self.state = if self.keep_alive {
            State::Head
        } else {
            State::Closed
        };
    }

    /// Parses one head at the start of `input` (which does not start with an empty line);
    /// `None` while it is not whole.
    fn head<S: Sink>(&mut self, input: &[u8], sink: &mut S) -> Result<Option<usize>, ParseError> {
        // Only the bytes not scanned yet: for a CR at the end of the last scan, its follower
        // decides; the end, CRLF CRLF, may straddle the two.
        let check_from = match self.scanned {
            0 => 0,
            n if input[n - 1] == b'\r' => n - 1,
            n => n,
        };
        let search_from = self.scanned.saturating_sub(3);
        let Some(end) = find(&input[search_from..], b"\r\n\r\n").map(|i| search_from + i + 4)
        else {
            // A bare LF is refused as soon as it is read, not when the head ends.
            check_line_ends(&input[check_from..])?;
            if input.len() > self.max_head {
                return Err(ParseError::HeadTooLarge);
            }
            self.lines_checked = check_partial_head(input, self.lines_checked, self.scanned)?;
            self.scanned = input.len();
            return Ok(None);
        };
        check_line_ends(&input[check_from..end])?;
        self.scanned = 0;
        self.lines_checked = 0;
        let input = &input[..end];
        let mut slots = [httparse::EMPTY_HEADER; HEADERS_FIRST_TRY];
        let mut more: Vec<httparse::Header<'_>>;
        let mut request = httparse::Request::new(&mut slots);
        let mut status = request.parse(input);
        if status == Err(httparse::Error::TooManyHeaders) {
            // No more header lines than lines.
            more = vec![httparse::EMPTY_HEADER; input.iter().filter(|&&b| b == b'\n').count()];
            request = httparse::Request::new(&mut more);
            status = request.parse(input);
        }
        let used = match status {
            Ok(httparse::Status::Complete(used)) => used,
            // The head ends at the first empty line (none precedes the request line).
            Ok(httparse::Status::Partial) => {
                return Err(ParseError::Invalid("invalid request head"))
            }
            Err(err) => return Err(ParseError::Invalid(head_error(err))),
        };
        let method = request.method.unwrap_or("");
        let target = request.path.unwrap_or("").as_bytes();
        let minor_version = request.version.unwrap_or(1);
        let (path, query) = if method == "OPTIONS" && target == b"*" {
            // asterisk-form (RFC 9112 3.2.4): the path is "*", as httptools reads it.
            (target, &b""[..])
        } else {
            split_target(target)?
        };
        let fields = Fields::read(request.headers)?;
        let framing = fields.framing(minor_version)?;
        self.keep_alive = minor_version == 1 && !fields.close;
        let head = Head {
            method,
            target,
            path,
            query,
            minor_version,
            headers: request.headers,
            keep_alive: self.keep_alive,
            expect_continue: fields.expect_continue,
            upgrade: if fields.upgrade_token {
                fields.upgrade
            } else {
                None
            },
        };
        if sink.head(&head) {
            self.state = State::Upgraded;
            return Ok(Some(used));
        }
        match framing {
            Framing::Length(0) => self.finish(sink),
            Framing::Length(n) => self.state = State::Body(n),
            Framing::Chunked => self.state = State::ChunkSize,
        }
        Ok(Some(used))
    }
}

/// Hands the sink as much of `rest` as the `left` body bytes still to come allow; returns
/// how many it took and how many are still to come.
fn pass_body<S: Sink>(rest: &[u8], left: u64, sink: &mut S) -> (usize, u64) {
    let take = usize::try_from(left).unwrap_or(usize::MAX).min(rest.len());
    sink.body(&rest[..take]);
    (take, left - take as u64)
}

enum Framing {
    Length(u64),
    Chunked,
}

/// What the parser reads from the header fields.
#[derive(Default)]
struct Fields<'a> {
    content_length: Option<u64>,
    /// A Transfer-Encoding field was present (its codings, across every field, are then
    /// `chunked` alone: anything else is refused).
    transfer_encoding: bool,
    close: bool,
    upgrade_token: bool,
    upgrade: Option<&'a [u8]>,
    expect_continue: bool,
    /// Host fields seen.
    hosts: usize,
}

impl<'a> Fields<'a> {
    fn read(headers: &[httparse::Header<'a>]) -> Result<Self, ParseError> {
        let mut fields = Fields::default();
        // Transfer codings across every Transfer-Encoding field, in order.
        let mut codings = 0usize;
        let mut chunked_at = None;
        for header in headers {
            let name = header.name.as_bytes();
            let value = header.value;
            if name.eq_ignore_ascii_case(b"content-length") {
                if fields.content_length.is_some() {
                    return Err(ParseError::Invalid("more than one Content-Length"));
                }
                fields.content_length = Some(content_length(value)?);
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                fields.transfer_encoding = true;
                for coding in tokens(value) {
                    // An empty item could be ignored (RFC 9110 5.6.1); h11 refuses it,
                    // and so does this parser: in framing, strict.
                    if coding.is_empty() {
                        return Err(ParseError::Invalid("unsupported Transfer-Encoding"));
                    }
                    if coding.eq_ignore_ascii_case(b"chunked") {
                        if chunked_at.is_some() {
                            return Err(ParseError::Invalid("chunked applied twice"));
                        }
                        chunked_at = Some(codings);
                    }
                    codings += 1;
                }
            } else if name.eq_ignore_ascii_case(b"connection") {
                for option in tokens(value) {
                    if option.eq_ignore_ascii_case(b"close") {
                        fields.close = true;
                    } else if option.eq_ignore_ascii_case(b"upgrade") {
                        fields.upgrade_token = true;
                    }
                }
            } else if name.eq_ignore_ascii_case(b"upgrade") {
                fields.upgrade = Some(value);
            } else if name.eq_ignore_ascii_case(b"host") {
                fields.hosts += 1;
            } else if name.eq_ignore_ascii_case(b"expect") {
                fields.expect_continue |= value.eq_ignore_ascii_case(b"100-continue");
            }
        }
        if fields.transfer_encoding {
            // RFC 9112 6.3: a request whose final coding is not chunked cannot be framed.
            if chunked_at.is_none() || codings != 1 {
                return Err(ParseError::Invalid("unsupported Transfer-Encoding"));
            }
        }
        Ok(fields)
    }

    fn framing(&self, minor_version: u8) -> Result<Framing, ParseError> {
        // RFC 9112 3.2: HTTP/1.1 names its host once; no request names two.
        if self.hosts > 1 || (self.hosts == 0 && minor_version == 1) {
            return Err(ParseError::Invalid(if self.hosts > 1 {
                "more than one Host"
            } else {
                "no Host in an HTTP/1.1 request"
            }));
        }
        match (self.transfer_encoding, self.content_length) {
            (true, Some(_)) => Err(ParseError::Invalid(
                "both Content-Length and Transfer-Encoding",
            )),
            (true, None) if minor_version == 0 => Err(ParseError::Invalid(
                "Transfer-Encoding in an HTTP/1.0 request",
            )),
            (true, None) => Ok(Framing::Chunked),
            (false, length) => Ok(Framing::Length(length.unwrap_or(0))),
        }
    }
}

/// The comma-separated items of a field value, trimmed of spaces and tabs.
fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(trim)
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

/// Digits only, no sign, no list: a length two readers could read differently is refused.
fn content_length(value: &[u8]) -> Result<u64, ParseError> {
    const BAD: ParseError = ParseError::Invalid("invalid Content-Length");
    let digits = trim(value);
    if digits.is_empty() {
        return Err(BAD);
    }
    digits.iter().try_fold(0u64, |n, &b| {
        if !b.is_ascii_digit() {
            return Err(BAD);
        }
        n.checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(b - b'0')))
            .ok_or(BAD)
    })
}

const LINE_TOO_LONG: &str = "line too long";

/// The length of the line at the start of `input` (without its CRLF), `None` while no
/// line end has come. A bare LF is refused; so is a line longer than `limit`.
fn line_at(input: &[u8], limit: usize) -> Result<Option<usize>, ParseError> {
    let window = &input[..input.len().min(limit.saturating_add(2))];
    match window.iter().position(|&b| b == b'\n') {
        Some(0) => Err(ParseError::Invalid("bare LF")),
        Some(i) if window[i - 1] != b'\r' => Err(ParseError::Invalid("bare LF")),
        Some(i) => {
            let line = i - 1;
            if window[..line].contains(&b'\r') {
                return Err(ParseError::Invalid("bare CR"));
            }
            Ok(Some(line))
        }
        None if input.len() > limit.saturating_add(1) => Err(ParseError::Invalid(LINE_TOO_LONG)),
        None => Ok(None),
    }
}

/// A chunk-size line: hex digits, then optionally `;` and extensions (ignored).
fn chunk_size(line: &[u8]) -> Result<u64, ParseError> {
    const BAD: ParseError = ParseError::Invalid("invalid chunk size");
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(BAD);
    }
    let size = line[..digits].iter().try_fold(0u64, |n, &b| {
        let digit = (b as char).to_digit(16).map(u64::from).ok_or(BAD)?;
        n.checked_mul(16)
            .and_then(|n| n.checked_add(digit))
            .ok_or(BAD)
    })?;
    let ext = &line[digits..];
    // chunk-ext = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] ): whatever it says, it
    // starts right after the size with `;` (no blank before it, as h11 asks) and holds no
    // control byte.
    if !ext.is_empty()
        && (ext[0] != b';' || ext.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f))
    {
        return Err(BAD);
    }
    Ok(size)
}

/// A trailer field line: a token, a colon, a value without control bytes. Trailers are
/// checked and then dropped (as httptools' protocol does with them).
fn trailer_line(line: &[u8]) -> Result<(), ParseError> {
    const BAD: ParseError = ParseError::Invalid("invalid trailer");
    let colon = line.iter().position(|&b| b == b':').ok_or(BAD)?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|&b| is_token(b)) {
        return Err(BAD);
    }
    if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(BAD);
    }
    Ok(())
}

/// RFC 9110 `tchar`.
pub fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The whole lines of an incomplete head from `from` on (the first one is the request
/// line), and the start of the request line while it is not whole: what `httparse` will
/// refuse once the head ends, refused now. Returns where the whole lines end. Bytes
/// before `scanned` were looked at by an earlier call: only the new ones are searched, so a
/// head fed a byte at a time costs linear time. (Line ends were checked already;
/// `httparse` checks everything again when the head is whole.)
fn check_partial_head(head: &[u8], mut from: usize, scanned: usize) -> Result<usize, ParseError> {
    let mut search = from.max(scanned.saturating_sub(1));
    while let Some(i) = find(&head[search..], b"\r\n") {
        let end = search + i;
        let line = &head[from..end];
        let ok = if from == 0 {
            request_line_ok(line)
        } else {
            match line.iter().position(|&b| b == b':') {
                Some(colon) => {
                    colon > 0
                        && line[..colon].iter().all(|&b| is_token(b))
                        && line[colon + 1..]
                            .iter()
                            .all(|&b| b == b'\t' || b >= b' ' && b != 0x7f)
                }
                None => false,
            }
        };
        if !ok {
            return Err(ParseError::Invalid(if from == 0 {
                "invalid request line"
            } else {
                "invalid header line"
            }));
        }
        from = end + 2;
        search = from;
    }
    if from == 0 && scanned < METHOD_CHECKED {
        // The request line so far: a method of token bytes, up to a space (looked at in
        // its first bytes only: any method is short; a long one is httparse's to judge).
        let start = &head[..head.len().min(METHOD_CHECKED)];
        let method_end = start.iter().position(|&b| b == b' ').unwrap_or(start.len());
        if !start[..method_end].iter().all(|&b| is_token(b)) {
            return Err(ParseError::Invalid("invalid method"));
        }
    }
    Ok(from)
}

/// `method SP target SP HTTP/1.x`, loosely: what no valid request line differs from.
fn request_line_ok(line: &[u8]) -> bool {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    !method.is_empty()
        && method.iter().all(|&b| is_token(b))
        && !target.is_empty()
        && target.iter().all(|&b| b > b' ' && b != 0x7f)
        && version.len() == 8
        && version.starts_with(b"HTTP/1.")
}

/// Every LF ends a CRLF; no CR stands alone (httparse accepts a bare LF as a line end).
fn check_line_ends(head: &[u8]) -> Result<(), ParseError> {
    let mut from = 0;
    while let Some(i) = head[from..].iter().position(|&b| b == b'\n' || b == b'\r') {
        let at = from + i;
        if head[at] == b'\n' {
            return Err(ParseError::Invalid("bare LF"));
        }
        match head.get(at + 1) {
            Some(b'\n') => from = at + 2,
            None => return Ok(()), // the LF has not come yet
            Some(_) => return Err(ParseError::Invalid("bare CR")),
        }
    }
    Ok(())
}

/// Path and query of a request target in origin form (`/p?q`) or absolute form
/// (`http://host/p?q`); a fragment is dropped. Asterisk and authority forms (`OPTIONS *`,
/// `CONNECT host:port`) and non-ASCII bytes are refused: an ASGI path is ASCII.
fn split_target(target: &[u8]) -> Result<(&[u8], &[u8]), ParseError> {
    if !target.is_ascii() {
        return Err(ParseError::Invalid("non-ASCII request target"));
    }
    let without_fragment = match target.iter().position(|&b| b == b'#') {
        Some(i) => &target[..i],
        None => target,
    };
    let path_and_query = if without_fragment.first() == Some(&b'/') {
        without_fragment
    } else {
        let Some(scheme_end) = find(without_fragment, b"://") else {
            return Err(ParseError::Invalid("invalid request target"));
        };
        let scheme = &without_fragment[..scheme_end];
        if scheme.is_empty() || !scheme.iter().all(|b| b.is_ascii_alphabetic()) {
            return Err(ParseError::Invalid("invalid request target"));
        }
        let after = &without_fragment[scheme_end + 3..];
        match after.iter().position(|&b| b == b'/' || b == b'?') {
            Some(i) if after[i] == b'/' => &after[i..],
            Some(i) => return Ok((b"/", &after[i + 1..])),
            None => b"/",
        }
    };
    Ok(match path_and_query.iter().position(|&b| b == b'?') {
        Some(i) => (&path_and_query[..i], &path_and_query[i + 1..]),
        None => (path_and_query, b""),
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn head_error(err: httparse::Error) -> &'static str {
    match err {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line end",
        httparse::Error::Status => "invalid request line",
        httparse::Error::Token => "invalid method or request line",
        httparse::Error::TooManyHeaders => "too many headers",
        httparse::Error::Version => "invalid HTTP version",
    }
}

#[cfg(test)]
mod tests;
