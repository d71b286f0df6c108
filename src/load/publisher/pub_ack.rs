//! A PubAck read in place: `{"stream":"S",["domain":"D",]"seq":N[,"duplicate":true]}`,
//! the form nats-server writes for every stored message
//! (`JSPubAckResponse`), parsed without serde's allocations. Anything
//! else, errors and forms this does not know included, returns `None` and
//! goes to serde, so a PubAck this cannot read is never misread.

use crate::wire::frame::parse_u64;

/// The stream sequence and the duplicate flag of a PubAck that stored (or
/// deduplicated) its message; `None` when `payload` is not that form.
#[inline]
pub(super) fn parse(payload: &[u8]) -> Option<(u64, bool)> {
    let rest = payload.strip_prefix(b"{\"stream\":\"")?;
    // A name with an escape is left to serde; names are plain in practice.
    let close = memchr::memchr2(b'"', b'\\', rest)?;
    if rest[close] != b'"' {
        return None;
    }
    let mut rest = &rest[close + 1..];
    let (mut seq, mut duplicate) = (None, false);
    while let Some(after) = rest.strip_prefix(b",") {
        let (key, value, tail) = field(after.trim_ascii_start())?;
        match key {
            b"seq" => seq = Some(parse_u64(value)?),
            b"duplicate" => {
                duplicate = match value {
                    b"true" => true,
                    b"false" => false,
                    _ => return None,
                }
            }
            b"domain" if value.first() == Some(&b'"') => {}
            // An error, a batch's or a counter's fields: serde's to read.
            _ => return None,
        }
        rest = tail;
    }
    if rest != b"}" {
        return None;
    }
    seq.filter(|&s| s > 0).map(|s| (s, duplicate))
}

/// `"key":value` at the start of `text`: the key, the raw value (a number,
/// `true`/`false`, or a string without escapes, quotes kept) and what
/// follows it.
#[inline]
fn field(text: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let text = text.strip_prefix(b"\"")?;
    let key_end = memchr::memchr(b'"', text)?;
    let key = &text[..key_end];
    let value = text[key_end + 1..].strip_prefix(b":")?;
    // The server writes a duplicate's flag as `"duplicate": true`.
    let value = value.trim_ascii_start();
    let end = if value.first() == Some(&b'"') {
        let close = memchr::memchr2(b'"', b'\\', &value[1..])?;
        if value[1 + close] != b'"' {
            return None;
        }
        close + 2
    } else {
        value
            .iter()
            .position(|&b| b == b',' || b == b'}')
            .unwrap_or(value.len())
    };
    Some((key, &value[..end], &value[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_a_server_stores_with_are_read() {
        // As nats-server 2.15.1 writes them (captured from its replies).
        assert_eq!(parse(br#"{"stream":"S","seq":42}"#), Some((42, false)));
        // A duplicate, as stream.go appends it: a space after the colon.
        assert_eq!(
            parse(br#"{"stream":"jsb-lat","seq":7,"duplicate": true}"#),
            Some((7, true))
        );
        assert_eq!(
            parse(br#"{"stream":"jsb-lat","seq":7,"duplicate":true}"#),
            Some((7, true))
        );
        assert_eq!(
            parse(br#"{"stream":"S","domain":"hub","seq":9,"duplicate": true}"#),
            Some((9, true))
        );
        assert_eq!(
            parse(br#"{"stream":"S","domain":"hub","seq":18446744073709551615}"#),
            Some((u64::MAX, false))
        );
    }

    #[test]
    fn everything_else_is_left_to_serde() {
        for other in [
            &br#"{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}"#[..],
            br#"{"stream":"S","seq":0}"#,
            br#"{"stream":"S"}"#,
            br#"{"stream":"S","seq":4,"batch":"b","count":3}"#,
            br#"{"stream":"S","seq":4,"val":"12"}"#,
            br#"{"stream":"a\"b","seq":1}"#,
            br#"{"stream":"S","seq":-1}"#,
            br#"{"stream":"S","seq":1,"duplicate": truth}"#,
            br#"{"stream":"S","seq":1,"duplicate":1}"#,
            br#"{"stream":"S","seq":1} "#,
            br#"{"stream":"S","seq":1"#,
            b"garbage",
            b"",
        ] {
            assert_eq!(parse(other), None, "{}", String::from_utf8_lossy(other));
        }
    }
}
