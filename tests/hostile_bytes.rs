//! Random bytes where jsbench reads what others wrote: worker messages
//! (announcements, replies, result chunks, packed results), histograms and
//! results files. None may panic, and none may make jsbench hold more than
//! a stated cap: the bytes come from a worker on another host, a CI
//! artifact or a history file (issue 51).
//!
//! The cap checked here is the process's peak resident memory growing by
//! less than 64 MiB over every input: each input is at most 4 KiB, and the
//! readers' own caps (a histogram's 16 MiB, a chunk's 512 KiB) hold far
//! below that for inputs this small. A reader that believed a length field
//! (the histogram header's 4 GiB) would blow through it at once.

use base64::Engine as _;
use jsbench::record::histogram::Recorder;
use jsbench::record::random;
use jsbench::record::tally::Tally;
use jsbench::results::summary::Summary;
use jsbench::worker::auth::Key;
use jsbench::worker::protocol::{self, chunk};

/// The peak resident memory of this process so far, in bytes.
fn peak_rss() -> u64 {
    // SAFETY: getrusage fills the struct it is handed; zeroed is a valid
    // starting value for a plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_maxrss as u64 * 1024
}

/// Input `i`: random bytes of a random length up to 4 KiB, sometimes
/// opened with what the reader looks for first (a histogram cookie, a
/// chunk's `C`, a JSON brace) so the bytes get past the first check.
fn input(i: u64) -> Vec<u8> {
    let len = random::below(7, i, 0, 4096) as usize;
    let mut bytes: Vec<u8> = (0..len as u64)
        .map(|j| random::below(11, i, j, 256) as u8)
        .collect();
    let prefix: &[u8] = match i % 5 {
        0 => &[0x1c, 0x84, 0x93, 0x13],
        1 => &[0x1c, 0x84, 0x93, 0x14],
        2 => b"C",
        3 => b"{\"kind\":\"announce\",\"run\":\"\",\"seq\":0,\"body\":",
        _ => b"",
    };
    bytes.splice(0..0, prefix.iter().copied());
    bytes
}

#[test]
fn random_bytes_from_others_neither_panic_nor_exhaust_memory() {
    let signed = Key::from_secret(b"a secret of at least sixteen bytes").unwrap();
    let open = Key::insecure();
    let before = peak_rss();
    let mut refused = 0u64;
    const INPUTS: u64 = 4000;
    for i in 0..INPUTS {
        let bytes = input(i);
        let text = String::from_utf8_lossy(&bytes);
        for key in [&signed, &open] {
            refused += u64::from(key.open_announce(&bytes).is_err());
            refused += u64::from(key.open_reply("run", 1, &bytes).is_err());
            refused += u64::from(key.open_chunk("run", 1, &bytes).is_err());
        }
        if let Some((total, index, data)) = chunk::parse(&bytes) {
            let _ = chunk::check(total, index, 0, data, 0);
        }
        refused += u64::from(protocol::unpack::<serde_json::Value>(&bytes).is_err());
        let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
        refused += u64::from(Recorder::from_base64(&b64).is_err());
        refused += u64::from(serde_json::from_slice::<Recorder>(&bytes).is_err());
        refused += u64::from(serde_json::from_slice::<Tally>(&bytes).is_err());
        refused += u64::from(serde_json::from_str::<Summary>(&text).is_err());
    }
    let grown = peak_rss().saturating_sub(before);
    assert!(
        grown < 64 << 20,
        "reading {INPUTS} hostile inputs of at most 4 KiB grew the peak by {grown} bytes"
    );
    // Random bytes are refused, nearly all of them: a reader that took
    // them would be the bug this test looks for from the other side.
    assert!(refused > INPUTS * 10, "only {refused} refusals");
}
