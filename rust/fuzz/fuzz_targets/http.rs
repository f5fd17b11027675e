//! rsloop.http's request parser and response head writer on any bytes. The parser never
//! panics, and reads the same events, and fails or not alike, whether the bytes come at
//! once or cut at any two points (a read boundary must not change how a request is
//! framed; only the bound on an incomplete head depends on the reads, as in h11);
//! a response head written from any header never holds a line break an application put
//! in it (no response splitting).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../src/http/request.rs"]
mod request;
#[path = "../../src/http/response.rs"]
mod response;

use request::{Head, ParseError, RequestParser, Sink};

#[derive(Default, PartialEq, Debug)]
struct Seen {
    events: Vec<(u8, Vec<u8>)>,
}

impl Sink for Seen {
    fn head(&mut self, head: &Head<'_>) -> bool {
        let mut line = head.method.as_bytes().to_vec();
        line.push(b' ');
        line.extend_from_slice(head.target);
        for h in head.headers {
            line.extend_from_slice(h.name.as_bytes());
            line.push(b':');
            line.extend_from_slice(h.value);
        }
        line.push(u8::from(head.keep_alive));
        self.events.push((0, line));
        head.upgrade
            .is_some_and(|u| u.eq_ignore_ascii_case(b"websocket"))
    }
    fn body(&mut self, chunk: &[u8]) {
        // Bodies are compared as one stream: how they are cut depends on the reads.
        match self.events.last_mut() {
            Some((1, body)) => body.extend_from_slice(chunk),
            _ => self.events.push((1, chunk.to_vec())),
        }
    }
    fn complete(&mut self) {
        self.events.push((2, Vec::new()));
    }
    fn upgraded(&mut self, rest: &[u8]) {
        match self.events.last_mut() {
            Some((3, all)) => all.extend_from_slice(rest),
            _ => self.events.push((3, rest.to_vec())),
        }
    }
}

fn read(parts: &[&[u8]], max_head: usize) -> (Seen, Option<ParseError>) {
    let mut parser = RequestParser::new(max_head);
    let mut seen = Seen::default();
    for part in parts {
        if let Err(err) = parser.feed(part, &mut seen) {
            return (seen, Some(err));
        }
    }
    (seen, None)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let max_head = 64 + usize::from(data[0]) * 8;
    let input = &data[3..];
    let a = usize::from(data[1]) * input.len() / 256;
    let b = a + (input.len() - a) * usize::from(data[2]) / 256;
    let whole = read(&[input], max_head);
    let cut = read(&[&input[..a], &input[a..b], &input[b..]], max_head);
    // The same events, and an error in both or neither. (Which fault of a bad head is
    // named may depend on how much of it had come.) An incomplete head is bounded, a whole
    // one is not (as h11 bounds them): where one reading found the head too large, the
    // other may have read it; both agree up to there.
    let too_large = |r: &(Seen, Option<ParseError>)| matches!(r.1, Some(ParseError::HeadTooLarge));
    if too_large(&whole) || too_large(&cut) {
        let n = whole.0.events.len().min(cut.0.events.len());
        assert_eq!(whole.0.events[..n], cut.0.events[..n], "cut at {a} and {b}");
    } else {
        assert_eq!(whole.0, cut.0, "cut at {a} and {b}");
        assert_eq!(
            whole.1.is_some(),
            cut.1.is_some(),
            "cut at {a} and {b}: {whole:?} {cut:?}"
        );
    }

    // The response head: any name and value, split at the first 0xff.
    let (name, value) = match input.iter().position(|&x| x == 0xff) {
        Some(i) => (&input[..i], &input[i + 1..]),
        None => (input, &b""[..]),
    };
    let mut out = Vec::new();
    let mut writer = response::HeadWriter::new(&mut out, b"HTTP/1.1 200 OK\r\n", true);
    if writer.header(name, value).is_ok() {
        writer.finish(false, 200);
        let lines = out.split(|&x| x == b'\n').count();
        assert!(lines <= 5, "{out:?}");
        assert!(
            !out.windows(2).any(|w| w[0] == b'\r' && w[1] != b'\n'),
            "{out:?}"
        );
    }
});
