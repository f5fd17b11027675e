//! The request parser on whole, byte-by-byte and hostile input.

use super::*;

#[derive(Debug, PartialEq, Eq)]
enum Ev {
    Head(String, Vec<u8>, Vec<u8>, u8, Vec<(String, Vec<u8>)>, bool),
    Body(Vec<u8>),
    Complete,
    Upgraded(Vec<u8>),
}

#[derive(Default)]
struct Collect {
    events: Vec<Ev>,
    take_upgrade: bool,
}

impl Sink for Collect {
    fn head(&mut self, head: &Head<'_>) -> bool {
        self.events.push(Ev::Head(
            head.method.to_owned(),
            head.path.to_vec(),
            head.query.to_vec(),
            head.minor_version,
            head.headers
                .iter()
                .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
                .collect(),
            head.keep_alive,
        ));
        self.take_upgrade && head.upgrade.is_some()
    }
    fn body(&mut self, chunk: &[u8]) {
        match self.events.last_mut() {
            Some(Ev::Body(b)) => b.extend_from_slice(chunk),
            _ => self.events.push(Ev::Body(chunk.to_vec())),
        }
    }
    fn complete(&mut self) {
        self.events.push(Ev::Complete);
    }
    fn upgraded(&mut self, rest: &[u8]) {
        self.events.push(Ev::Upgraded(rest.to_vec()));
    }
}

/// Feeds `input` whole, then byte by byte: both must give the same events, and fail
/// or not alike.
fn parse(input: &[u8]) -> Result<Vec<Ev>, ParseError> {
    let mut whole = Collect::default();
    let r1 = RequestParser::new(8192).feed(input, &mut whole);
    let mut bytewise = Collect::default();
    let mut parser = RequestParser::new(8192);
    let mut r2 = Ok(());
    for b in input {
        r2 = parser.feed(std::slice::from_ref(b), &mut bytewise);
        if r2.is_err() {
            break;
        }
    }
    // Which fault of a bad head is named may depend on how much of it had come.
    assert_eq!(
        r1.is_ok(),
        r2.is_ok(),
        "whole and byte-by-byte disagree on {input:?}"
    );
    assert_eq!(whole.events, bytewise.events);
    r1.map(|()| whole.events)
}

fn invalid(input: &[u8]) -> &'static str {
    match parse(input) {
        Err(ParseError::Invalid(why)) => why,
        other => panic!("{input:?} gave {other:?}"),
    }
}

#[test]
fn a_get_and_its_fields() {
    let ev = parse(b"GET /a%20b?x=1#frag HTTP/1.1\r\nHost: h\r\nX-A:  v \r\n\r\n").unwrap();
    assert_eq!(
        ev,
        vec![
            Ev::Head(
                "GET".into(),
                b"/a%20b".to_vec(),
                b"x=1".to_vec(),
                1,
                vec![
                    ("host".into(), b"h".to_vec()),
                    ("x-a".into(), b"v".to_vec())
                ],
                true
            ),
            Ev::Complete
        ]
    );
}

#[test]
fn pipelined_bodies_in_order() {
    let ev = parse(
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcPOST /2 HTTP/1.1\r\nHost: h\r\n\
          Transfer-Encoding: chunked\r\n\r\n2;ext=1\r\nde\r\n1\r\nf\r\n0\r\nT: v\r\n\r\n",
    )
    .unwrap();
    assert_eq!(ev[1], Ev::Body(b"abc".to_vec()));
    assert_eq!(ev[2], Ev::Complete);
    assert!(matches!(&ev[3], Ev::Head(_, p, ..) if p == b"/2"));
    assert_eq!(ev[4], Ev::Body(b"def".to_vec()));
    assert_eq!(ev[5], Ev::Complete);
    assert_eq!(ev.len(), 6);
}

#[test]
fn close_stops_reading_and_http10_does_not_keep_alive() {
    let ev =
        parse(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGARBAGE\r\n\r\n").unwrap();
    assert_eq!(ev.len(), 2);
    assert!(matches!(&ev[0], Ev::Head(.., false)));
    let ev = parse(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap();
    assert!(matches!(&ev[0], Ev::Head(_, _, _, 0, _, false)));
}

#[test]
fn smuggling_is_refused() {
    assert_eq!(
        invalid(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"),
        "both Content-Length and Transfer-Encoding"
    );
    assert_eq!(
        invalid(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n"),
        "more than one Content-Length"
    );
    for cl in [
        &b"-1"[..],
        b"+3",
        b"3,3",
        b"0x3",
        b"",
        b"99999999999999999999",
    ] {
        let mut req = b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: ".to_vec();
        req.extend_from_slice(cl);
        req.extend_from_slice(b"\r\n\r\n");
        assert_eq!(invalid(&req), "invalid Content-Length", "{cl:?}");
    }
    for te in [
        &b"gzip"[..],
        b"chunked, gzip",
        b"chunked, chunked",
        b"identity",
    ] {
        let mut req = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: ".to_vec();
        req.extend_from_slice(te);
        req.extend_from_slice(b"\r\n\r\n");
        invalid(&req);
    }
    invalid(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n");
}

#[test]
fn bad_chunks_are_refused() {
    let head = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for body in [
        &b"x\r\n"[..],
        b"-1\r\n",
        b"1 1\r\n",
        b"10000000000000000\r\nx",
        b"1\r\nab\r\n",
        b"1\nb\r\n",
        b"0\r\nbad trailer\r\n\r\n",
        b"1;\x00\r\n",
    ] {
        let mut req = head.clone();
        req.extend_from_slice(body);
        invalid(&req);
    }
}

#[test]
fn line_ends_folds_and_nul() {
    assert_eq!(invalid(b"GET / HTTP/1.1\nHost: h\r\n\r\n"), "bare LF");
    assert_eq!(invalid(b"GET / HTTP/1.1\r\nHost: h\n\r\n"), "bare LF");
    invalid(b"GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n");
    invalid(b"GET / HTTP/1.1\r\nHost: h\r\nA: b\r\n  folded\r\n\r\n");
    invalid(b"GET / HTTP/1.1\r\nHost: h\r\nA: b\x00c\r\n\r\n");
    invalid(b"GET / HTTP/1.1\r\nHost: h\r\nA b: c\r\n\r\n");
    invalid(b"GET / HTTP/2.0\r\n\r\n");
    let ev = parse(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    assert!(matches!(&ev[0], Ev::Head(_, p, ..) if p == b"*"));
    invalid(b"GET * HTTP/1.1\r\nHost: h\r\n\r\n");
    invalid(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: ,chunked\r\n\r\n");
    invalid(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1 ;a\r\nx\r\n");
    invalid(b"CONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n");
    invalid(b"GET /\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n");
}

#[test]
fn a_whole_head_past_the_limit_in_one_read_is_read_as_h11_reads_it() {
    let mut req = b"GET / HTTP/1.1\r\nHost: h\r\nCookie: ".to_vec();
    req.extend(std::iter::repeat_n(b'c', 200));
    req.extend_from_slice(b"\r\n\r\n");
    let mut sink = Collect::default();
    RequestParser::new(64).feed(&req, &mut sink).unwrap();
    assert_eq!(sink.events.len(), 2);
    // Incomplete and past it: refused.
    let mut parser = RequestParser::new(64);
    assert_eq!(
        parser.feed(&req[..100], &mut sink),
        Err(ParseError::HeadTooLarge)
    );
}

#[test]
fn empty_lines_before_a_request_and_expect() {
    let ev =
        parse(b"\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nExpect: x\r\n\r\n")
            .unwrap();
    assert_eq!(ev.len(), 2);
    let mut parser = RequestParser::new(64);
    let mut sink = Collect::default();
    for _ in 0..1000 {
        parser.feed(b"\r\n", &mut sink).unwrap();
    }
    assert_eq!(parser.buffered(), 0);
    invalid(b"\nGET / HTTP/1.1\r\nHost: h\r\n\r\n");
}

#[test]
fn a_bad_trailer_is_named() {
    assert_eq!(
        invalid(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nT: v\n\r\n"),
        "bare LF"
    );
}

#[test]
fn host_once_and_required_in_http11() {
    assert_eq!(
        invalid(b"GET / HTTP/1.1\r\n\r\n"),
        "no Host in an HTTP/1.1 request"
    );
    assert_eq!(
        invalid(b"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n"),
        "more than one Host"
    );
    assert!(parse(b"GET / HTTP/1.0\r\n\r\n").is_ok());
}

#[test]
fn the_head_limit() {
    let mut parser = RequestParser::new(64);
    let mut sink = Collect::default();
    assert_eq!(
        parser.feed(b"GET / HTTP/1.1\r\nHost: h\r\n", &mut sink),
        Ok(())
    );
    let long = vec![b'a'; 64];
    assert_eq!(parser.feed(&long, &mut sink), Err(ParseError::HeadTooLarge));
    assert_eq!(
        parser.feed(b"\r\n", &mut sink),
        Err(ParseError::HeadTooLarge)
    );
    // Many short lines: past the first try's room, within the limit.
    let mut req = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
    for i in 0..200 {
        req.extend_from_slice(format!("h{i}: v\r\n").as_bytes());
    }
    req.extend_from_slice(b"\r\n");
    let mut parser = RequestParser::new(8192);
    let mut sink = Collect::default();
    parser.feed(&req, &mut sink).unwrap();
    assert!(matches!(&sink.events[0], Ev::Head(.., h, _) if h.len() == 201));
}

#[test]
fn absolute_form_and_upgrade() {
    let ev = parse(b"GET http://h:1/p?q HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    assert!(matches!(&ev[0], Ev::Head(_, p, q, ..) if p == b"/p" && q == b"q"));
    let ev = parse(b"GET http://h HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    assert!(matches!(&ev[0], Ev::Head(_, p, ..) if p == b"/"));
    let mut parser = RequestParser::new(8192);
    let mut sink = Collect {
        take_upgrade: true,
        ..Collect::default()
    };
    parser
        .feed(
            b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x00",
            &mut sink,
        )
        .unwrap();
    parser.feed(b"more", &mut sink).unwrap();
    assert_eq!(sink.events[1], Ev::Upgraded(b"\x81\x00".to_vec()));
    assert_eq!(sink.events[2], Ev::Upgraded(b"more".to_vec()));
}
