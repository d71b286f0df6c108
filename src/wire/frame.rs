//! NATS protocol frames, read in place and written into one buffer.
//!
//! Reading: the server's operations (`MSG`, `HMSG`, `PING`, `PONG`, `+OK`,
//! `-ERR`, `INFO`) are found in a read buffer and handed out as slices of
//! it, so a delivery costs no allocation and no copy. Writing: `PUB`,
//! `HPUB`, `SUB` and the rest are appended to a `Vec<u8>` the caller sends
//! when it chooses (one system call for everything a wake-up produced).
//! The grammar is the client protocol's (docs.nats.io, "Client Protocol"):
//! a control line ended by CRLF, then for messages a body of the announced
//! size and a CRLF.

use anyhow::{Result, anyhow, bail};

/// A control line longer than this is not NATS: the connection is broken
/// or is not talking to a NATS server.
pub const MAX_CONTROL_LINE: usize = 64 * 1024;

/// One operation from the server; slices borrow the read buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Msg(Msg<'a>),
    Ping,
    Pong,
    Ok,
    /// `-ERR`'s text without its quotes.
    Err(&'a str),
    /// `INFO`'s JSON.
    Info(&'a [u8]),
}

/// A `MSG` or `HMSG`. `reply` and `headers` are empty when absent.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Msg<'a> {
    pub subject: &'a [u8],
    pub sid: u64,
    pub reply: &'a [u8],
    /// The header block as sent (`NATS/1.0 ...\r\n` lines and the blank
    /// line), empty for a `MSG`.
    pub headers: &'a [u8],
    pub payload: &'a [u8],
}

impl<'a> Msg<'a> {
    /// The status code and description of the header block's first line
    /// (`NATS/1.0 404 No Messages`), as the server sends pull request and
    /// heartbeat statuses.
    pub fn status(&self) -> Option<(u16, &'a [u8])> {
        let line = first_line(self.headers)?;
        let rest = line.strip_prefix(b"NATS/1.0")?;
        let rest = trim_start(rest);
        if rest.len() < 3 || !rest[..3].iter().all(u8::is_ascii_digit) {
            return None;
        }
        let code = parse_u64(&rest[..3])? as u16;
        Some((code, trim_start(&rest[3..])))
    }

    /// The header block's `name: value` lines after its first, in order,
    /// each value without its leading whitespace.
    pub fn header_lines(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        self.headers
            .split(|&b| b == b'\n')
            .skip(1)
            .filter_map(|line| {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let colon = line.iter().position(|&b| b == b':')?;
                Some((&line[..colon], trim_start(&line[colon + 1..])))
            })
    }

    /// The first value of header `name` (compared without regard to case).
    pub fn header(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.header_lines()
            .find_map(|(n, value)| n.eq_ignore_ascii_case(name).then_some(value))
    }
}

/// Where a complete frame lies in the buffer: found by [`parse`] without
/// borrowing the result, so a reader can parse, then advance, then lend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    kind: Kind,
    /// Bytes the whole frame takes, control line and body included.
    pub len: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Msg {
        subject: (usize, usize),
        sid: u64,
        reply: (usize, usize),
        headers: (usize, usize),
        payload: (usize, usize),
    },
    Ping,
    Pong,
    Ok,
    Err((usize, usize)),
    Info((usize, usize)),
}

/// The frame at the start of `buf`, if all of it is there; `Ok(None)` when
/// more bytes are needed; an error for bytes that are not the protocol.
pub fn parse(buf: &[u8]) -> Result<Option<Head>> {
    // The first `\n` ends the control line (a payload comes after it):
    // memchr for one byte, not a substring search built per frame.
    let Some(nl) = memchr::memchr(b'\n', buf) else {
        if buf.len() > MAX_CONTROL_LINE {
            bail!("no end of line in {} bytes from the server", buf.len());
        }
        return Ok(None);
    };
    if nl == 0 || buf[nl - 1] != b'\r' {
        bail!(
            "a line from the server not ended by CRLF: {:?}",
            String::from_utf8_lossy(&buf[..nl.min(80)])
        );
    }
    let eol = nl - 1;
    let line = &buf[..eol];
    let body = eol + 2;
    let op_end = line
        .iter()
        .position(|&b| b == b' ' || b == b'\t')
        .unwrap_or(line.len());
    let op = &line[..op_end];
    let simple = |kind| Ok(Some(Head { kind, len: body }));
    if op.eq_ignore_ascii_case(b"MSG") {
        return message(buf, line, op_end, body, false);
    }
    if op.eq_ignore_ascii_case(b"HMSG") {
        return message(buf, line, op_end, body, true);
    }
    if op.eq_ignore_ascii_case(b"PING") {
        return simple(Kind::Ping);
    }
    if op.eq_ignore_ascii_case(b"PONG") {
        return simple(Kind::Pong);
    }
    if op.eq_ignore_ascii_case(b"+OK") {
        return simple(Kind::Ok);
    }
    if op.eq_ignore_ascii_case(b"-ERR") {
        let (mut from, mut to) = (op_end, eol);
        while from < to && matches!(buf[from], b' ' | b'\t' | b'\'') {
            from += 1;
        }
        while to > from && matches!(buf[to - 1], b' ' | b'\'') {
            to -= 1;
        }
        return simple(Kind::Err((from, to)));
    }
    if op.eq_ignore_ascii_case(b"INFO") {
        return simple(Kind::Info((op_end, eol)));
    }
    bail!(
        "unknown operation from the server: {:?}",
        String::from_utf8_lossy(&line[..line.len().min(80)])
    )
}

/// `MSG <subject> <sid> [reply] <size>` or
/// `HMSG <subject> <sid> [reply] <header size> <total size>`.
fn message(
    buf: &[u8],
    line: &[u8],
    op_end: usize,
    body: usize,
    hmsg: bool,
) -> Result<Option<Head>> {
    let mut fields: [(usize, usize); 5] = [(0, 0); 5];
    let mut n = 0;
    let mut i = op_end;
    while i < line.len() {
        while i < line.len() && (line[i] == b' ' || line[i] == b'\t') {
            i += 1;
        }
        let start = i;
        // A field's end found by memchr2: a subject or reply is tens of
        // bytes, and a byte loop over the line was most of a frame's cost.
        i = memchr::memchr2(b' ', b'\t', &line[i..]).map_or(line.len(), |at| i + at);
        if start < i {
            if n == fields.len() {
                return Err(bad_line(line));
            }
            fields[n] = (start, i);
            n += 1;
        }
    }
    let sizes = if hmsg { 2 } else { 1 };
    if n != 2 + sizes && n != 3 + sizes {
        return Err(bad_line(line));
    }
    let number = |(a, b): (usize, usize)| parse_u64(&line[a..b]).ok_or_else(|| bad_line(line));
    let sid = number(fields[1])?;
    let reply = if n == 3 + sizes { fields[2] } else { (0, 0) };
    let total = number(fields[n - 1])? as usize;
    let header_len = if hmsg {
        number(fields[n - 2])? as usize
    } else {
        0
    };
    if header_len > total {
        return Err(bad_line(line));
    }
    let len = body + total + 2;
    if buf.len() < len {
        return Ok(None);
    }
    if &buf[len - 2..len] != b"\r\n" {
        bail!(
            "a message from the server did not end where its size said: {:?}",
            String::from_utf8_lossy(line)
        );
    }
    Ok(Some(Head {
        kind: Kind::Msg {
            subject: fields[0],
            sid,
            reply,
            headers: (body, body + header_len),
            payload: (body + header_len, body + total),
        },
        len,
    }))
}

fn bad_line(line: &[u8]) -> anyhow::Error {
    anyhow!(
        "a malformed message line from the server: {:?}",
        String::from_utf8_lossy(&line[..line.len().min(200)])
    )
}

/// The frame `head` describes, lent from `buf` (the bytes `parse` saw).
pub fn lend(buf: &[u8], head: Head) -> Frame<'_> {
    let s = |(a, b): (usize, usize)| &buf[a..b];
    match head.kind {
        Kind::Msg {
            subject,
            sid,
            reply,
            headers,
            payload,
        } => Frame::Msg(Msg {
            subject: s(subject),
            sid,
            reply: s(reply),
            headers: s(headers),
            payload: s(payload),
        }),
        Kind::Ping => Frame::Ping,
        Kind::Pong => Frame::Pong,
        Kind::Ok => Frame::Ok,
        Kind::Err(range) => Frame::Err(std::str::from_utf8(s(range)).unwrap_or("(not UTF-8)")),
        Kind::Info(range) => Frame::Info(trim_start(s(range))),
    }
}

/// Decimal digits only, no sign, no overflow.
#[inline]
pub fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    if digits.len() < 20 {
        // 19 digits cannot overflow a u64: no checked arithmetic per digit.
        for &d in digits {
            if !d.is_ascii_digit() {
                return None;
            }
            n = n * 10 + u64::from(d - b'0');
        }
        return Some(n);
    }
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(n)
}

fn first_line(block: &[u8]) -> Option<&[u8]> {
    let end = memchr::memmem::find(block, b"\r\n")?;
    Some(&block[..end])
}

fn trim_start(b: &[u8]) -> &[u8] {
    let skip = b.iter().take_while(|c| c.is_ascii_whitespace()).count();
    &b[skip..]
}

/// Appends a `PUB` control line (`headers_len` 0) or an `HPUB` one:
/// `PUB <subject> [reply] <size>\r\n` or
/// `HPUB <subject> [reply] <header size> <total size>\r\n`. The caller
/// writes the header block, the payload and the closing `\r\n`.
#[inline]
fn put_pub_line(
    out: &mut Vec<u8>,
    subject: &[u8],
    reply: &[u8],
    headers_len: usize,
    payload_len: usize,
) {
    out.extend_from_slice(if headers_len == 0 { b"PUB " } else { b"HPUB " });
    out.extend_from_slice(subject);
    out.push(b' ');
    if !reply.is_empty() {
        out.extend_from_slice(reply);
        out.push(b' ');
    }
    if headers_len > 0 {
        put_number(out, headers_len as u64);
        out.push(b' ');
    }
    put_number(out, (headers_len + payload_len) as u64);
    out.extend_from_slice(b"\r\n");
}

/// Appends `PUB <subject> [reply] <size>\r\n<payload>\r\n`.
#[inline]
pub fn put_pub(out: &mut Vec<u8>, subject: &[u8], reply: &[u8], payload: &[u8]) {
    put_pub_line(out, subject, reply, 0, payload.len());
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
}

/// Appends `HPUB <subject> [reply] <header size> <total size>\r\n`, the
/// header block and the payload. `headers` is a whole block: `NATS/1.0\r\n`,
/// its lines, and the blank line that ends it.
#[inline]
pub fn put_hpub(out: &mut Vec<u8>, subject: &[u8], reply: &[u8], headers: &[u8], payload: &[u8]) {
    put_pub_line(out, subject, reply, headers.len(), payload.len());
    out.extend_from_slice(headers);
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
}

/// Appends `SUB <subject> <sid>\r\n`.
pub fn put_sub(out: &mut Vec<u8>, subject: &[u8], sid: u64) {
    out.extend_from_slice(b"SUB ");
    out.extend_from_slice(subject);
    out.push(b' ');
    put_number(out, sid);
    out.extend_from_slice(b"\r\n");
}

#[inline]
pub fn put_number(out: &mut Vec<u8>, n: u64) {
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(digits.format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(buf: &[u8]) -> Frame<'_> {
        let head = parse(buf).unwrap().expect("a whole frame");
        assert_eq!(head.len, buf.len(), "the frame takes the whole input");
        lend(buf, head)
    }

    #[test]
    fn a_msg_and_an_hmsg_are_lent_in_place() {
        let Frame::Msg(m) = one(b"MSG s.1 9 $JS.ACK.a.b.1.2.3.4.5 5\r\nhello\r\n") else {
            panic!("not a message")
        };
        assert_eq!(
            (m.subject, m.sid, m.reply, m.headers, m.payload),
            (
                &b"s.1"[..],
                9,
                &b"$JS.ACK.a.b.1.2.3.4.5"[..],
                &b""[..],
                &b"hello"[..]
            )
        );
        let raw = b"HMSG _INBOX.x 2 34 34\r\nNATS/1.0 404 No Messages\r\nA: b\r\n\r\n\r\n";
        let Frame::Msg(m) = one(raw) else {
            panic!("not a message")
        };
        assert_eq!(m.reply, b"");
        assert_eq!(m.payload, b"");
        assert_eq!(m.status(), Some((404, &b"No Messages"[..])));
        assert_eq!(m.header(b"a"), Some(&b"b"[..]));
        assert_eq!(m.header(b"Nats-Pending-Messages"), None);
    }

    #[test]
    fn a_frame_cut_anywhere_waits_for_the_rest() {
        let whole = b"HMSG s 1 r 12 17\r\nNATS/1.0\r\n\r\nhello\r\nPING\r\n";
        for cut in 0..whole.len() - 6 {
            assert_eq!(parse(&whole[..cut]).unwrap(), None, "cut at {cut}");
        }
        let head = parse(whole).unwrap().unwrap();
        assert_eq!(
            lend(
                &whole[head.len..],
                parse(&whole[head.len..]).unwrap().unwrap()
            ),
            Frame::Ping
        );
    }

    #[test]
    fn control_operations_read() {
        assert_eq!(one(b"PING\r\n"), Frame::Ping);
        assert_eq!(one(b"pong\r\n"), Frame::Pong);
        assert_eq!(one(b"+OK\r\n"), Frame::Ok);
        assert_eq!(
            one(b"-ERR 'Permissions Violation for Publish to \"x\"'\r\n"),
            Frame::Err("Permissions Violation for Publish to \"x\"")
        );
        assert_eq!(one(b"INFO {\"a\":1}\r\n"), Frame::Info(b"{\"a\":1}"));
    }

    #[test]
    fn what_is_not_the_protocol_is_refused_with_the_line() {
        for bad in [
            &b"MSG s x 5\r\nhello\r\n"[..],
            b"MSG s 1\r\n",
            b"HMSG s 1 9 5\r\nNATS/1.0\r\n",
            b"MSG s 1 5\r\nhello!!\r\n",
            b"WHAT\r\n",
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains("server"), "{e}");
        }
        assert!(parse(&vec![b'x'; MAX_CONTROL_LINE + 1]).is_err());
    }

    #[test]
    fn written_frames_read_back() {
        let mut out = Vec::new();
        put_pub(&mut out, b"s.1", b"_INBOX.r", b"hi");
        put_hpub(
            &mut out,
            b"s.2",
            b"",
            b"NATS/1.0\r\nNats-Msg-Id: 7\r\n\r\n",
            b"yo",
        );
        put_sub(&mut out, b"_INBOX.>", 3);
        assert_eq!(
            out,
            b"PUB s.1 _INBOX.r 2\r\nhi\r\nHPUB s.2 28 30\r\nNATS/1.0\r\nNats-Msg-Id: 7\r\n\r\nyo\r\nSUB _INBOX.> 3\r\n"
        );
        // A PUB read as the server would relay it, as a MSG.
        let relayed = b"HMSG s.2 1 28 30\r\nNATS/1.0\r\nNats-Msg-Id: 7\r\n\r\nyo\r\n";
        let Frame::Msg(m) = one(relayed) else {
            panic!()
        };
        assert_eq!(m.header(b"nats-msg-id"), Some(&b"7"[..]));
        assert_eq!(m.status(), None);
    }

    #[test]
    fn numbers_are_digits_only() {
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b""), None);
    }
}
