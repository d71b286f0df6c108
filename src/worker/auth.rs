//! Who a worker obeys and whose results a coordinator believes: every
//! message between them is sealed with an HMAC-SHA256 keyed by a secret
//! they share.
//!
//! NATS permissions decide who may publish on `jsb.workers.>`, but on a
//! shared staging cluster that is often everyone, and a worker runs
//! whatever drive it is handed with its own credentials. So a worker does
//! not trust a subject: it trusts a message whose tag proves the sender
//! holds the secret, for the run it joined, with a sequence number higher
//! than any it has obeyed (a recorded command replayed later is refused).
//! A recruit is bound to a nonce the worker announced for this wait
//! only, so a recorded recruit cannot pull it into a dead run. The
//! coordinator holds replies, heartbeats and result chunks to the same
//! rule, bound to the command they answer.
//!
//! The tag covers the direction and kind of the message, the run, the
//! sequence and the exact body bytes, each length-prefixed, so no field
//! can be moved into another and no command can be reflected as a reply.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, anyhow, bail};
use ring::hmac;
use serde::{Deserialize, Serialize};

use super::protocol::{Announce, Command, Heartbeat, Reply};
use crate::system::error::UsageError;

/// The environment variable that holds the secret itself (not a path).
pub const SECRET_ENV: &str = "JSBENCH_WORKER_SECRET";

/// The shortest secret accepted: shorter is guessable, and an empty file
/// is a mistake, not a choice.
pub const MIN_SECRET_BYTES: usize = 16;

/// How to make a secret, in every error that asks for one.
pub const MAKE_SECRET: &str = "head -c 32 /dev/urandom | base64 > secret";

/// Bytes of a result chunk's tag, ahead of the chunk.
pub const CHUNK_TAG: usize = 32;

/// Where the secret comes from, as the command line gave it.
#[derive(Debug, Clone, Default)]
pub struct SecretChoice {
    pub file: Option<std::path::PathBuf>,
    /// `--insecure-no-secret`: nothing sealed, everything believed.
    pub insecure: bool,
}

/// The shared key; `None` only with `--insecure-no-secret`, when tags are
/// neither written nor checked.
#[derive(Clone, Debug)]
pub struct Key(Option<hmac::Key>);

impl Key {
    /// A key from the secret's bytes, surrounding whitespace (the newline
    /// `base64 > secret` writes) left out.
    pub fn from_secret(secret: &[u8]) -> Result<Key> {
        let trimmed = secret.trim_ascii();
        if trimmed.len() < MIN_SECRET_BYTES {
            bail!(
                "the worker secret is {} bytes; at least {MIN_SECRET_BYTES} are needed (make one with `{MAKE_SECRET}`)",
                trimmed.len()
            );
        }
        Ok(Key(Some(hmac::Key::new(hmac::HMAC_SHA256, trimmed))))
    }

    /// No key: every message is believed. Only for experiments on a
    /// loopback server nobody else can reach.
    pub fn insecure() -> Key {
        Key(None)
    }

    pub fn is_insecure(&self) -> bool {
        self.0.is_none()
    }

    /// The key `role` (`jsbench worker`, `jsbench run --workers`) runs
    /// with: `--secret-file`, else [`SECRET_ENV`], else none only when
    /// `--insecure-no-secret` says so; a usage error naming all three
    /// otherwise.
    pub fn load(choice: &SecretChoice, role: &str) -> Result<Key> {
        if let Some(path) = &choice.file {
            return Key::from_file(path);
        }
        if let Some(value) = std::env::var_os(SECRET_ENV) {
            use std::os::unix::ffi::OsStrExt as _;
            return Key::from_secret(value.as_bytes())
                .with_context(|| format!("reading the worker secret from {SECRET_ENV}"));
        }
        if choice.insecure {
            return Ok(Key::insecure());
        }
        Err(UsageError(format!(
            "{role} needs the secret a coordinator and its workers share, or anyone who can \
             publish on jsb.workers.> could command the workers: give --secret-file PATH or set \
             {SECRET_ENV} (make one with `{MAKE_SECRET}` and give the same secret to the \
             coordinator and every worker); --insecure-no-secret runs without one, for \
             experiments on a loopback server only"
        ))
        .into())
    }

    fn from_file(path: &Path) -> Result<Key> {
        let meta = std::fs::metadata(path)
            .with_context(|| format!("reading the worker secret file {}", path.display()))?;
        // A secret is a few dozen bytes; anything large is the wrong file.
        if meta.len() > 4096 {
            bail!(
                "the worker secret file {} is {} bytes; a secret is at most 4096 (make one with `{MAKE_SECRET}`)",
                path.display(),
                meta.len()
            );
        }
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading the worker secret file {}", path.display()))?;
        Key::from_secret(&bytes)
            .with_context(|| format!("the worker secret file {}", path.display()))
    }

    /// Seals `value` as `kind` of `run`, number `seq`.
    pub fn seal<T: Serialize>(
        &self,
        kind: &str,
        run: &str,
        seq: u64,
        value: &T,
    ) -> Result<Vec<u8>> {
        let body = serde_json::to_string(value)?;
        let mac = match &self.0 {
            Some(key) => hex(hmac::sign(key, &tagged(kind, run, seq, body.as_bytes())).as_ref()),
            None => String::new(),
        };
        let sealed = Sealed {
            kind: kind.to_string(),
            run: run.to_string(),
            seq,
            body,
            mac,
        };
        Ok(serde_json::to_vec(&sealed)?)
    }

    /// The value of a sealed message of `kind`, with its run and sequence
    /// for the caller to hold against what it expects; an error when the
    /// tag does not prove the secret (checked in constant time).
    pub fn open<T: serde::de::DeserializeOwned>(
        &self,
        kind: &str,
        payload: &[u8],
    ) -> Result<Opened<T>> {
        let sealed: Sealed = serde_json::from_slice(payload).context("not a sealed message")?;
        if sealed.kind != kind {
            bail!("a {} where a {kind} was expected", sealed.kind);
        }
        if let Some(key) = &self.0 {
            let mac = unhex(&sealed.mac).ok_or_else(|| anyhow!("its tag is not hex"))?;
            let message = tagged(kind, &sealed.run, sealed.seq, sealed.body.as_bytes());
            hmac::verify(key, &message, &mac)
                .map_err(|_| anyhow!("its tag does not match this side's secret"))?;
        }
        let value = serde_json::from_str(&sealed.body).context("its body does not parse")?;
        Ok(Opened {
            run: sealed.run,
            seq: sealed.seq,
            value,
        })
    }

    /// A result chunk: its tag, then the chunk, bound to the fetch it
    /// answers. Binary, since the chunk is (deflated results).
    pub fn seal_chunk(&self, run: &str, seq: u64, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(CHUNK_TAG + chunk.len());
        match &self.0 {
            Some(key) => {
                out.extend_from_slice(hmac::sign(key, &tagged(CHUNK, run, seq, chunk)).as_ref())
            }
            None => out.extend_from_slice(&[0; CHUNK_TAG]),
        }
        out.extend_from_slice(chunk);
        out
    }

    /// The chunk of a reply to fetch `seq` of `run`, once its tag is
    /// checked.
    pub fn open_chunk<'a>(&self, run: &str, seq: u64, payload: &'a [u8]) -> Result<&'a [u8]> {
        if payload.len() < CHUNK_TAG {
            bail!("a results chunk of {} bytes has no tag", payload.len());
        }
        let (mac, chunk) = payload.split_at(CHUNK_TAG);
        if let Some(key) = &self.0 {
            hmac::verify(key, &tagged(CHUNK, run, seq, chunk), mac)
                .map_err(|_| anyhow!("a results chunk's tag does not match this side's secret"))?;
        }
        Ok(chunk)
    }

    /// A command to a worker.
    pub fn seal_command(&self, run: &str, seq: u64, command: &Command) -> Result<Vec<u8>> {
        self.seal(COMMAND, run, seq, command)
    }

    /// A worker's reply to command `seq` of `run`.
    pub fn seal_reply(&self, run: &str, seq: u64, reply: &Reply) -> Result<Vec<u8>> {
        self.seal(REPLY, run, seq, reply)
    }

    /// The reply to command `seq` of `run`: an answer to anything else
    /// (another command, another run) is refused like a forged one.
    pub fn open_reply(&self, run: &str, seq: u64, payload: &[u8]) -> Result<Reply> {
        let opened: Opened<Reply> = self.open(REPLY, payload)?;
        if opened.run != run || opened.seq != seq {
            bail!(
                "a reply to command {} of run {:?} where one to {seq} of {run:?} was expected",
                opened.seq,
                opened.run
            );
        }
        Ok(opened.value)
    }

    pub fn seal_announce(&self, announce: &Announce) -> Result<Vec<u8>> {
        self.seal(ANNOUNCE, "", 0, announce)
    }

    pub fn open_announce(&self, payload: &[u8]) -> Result<Announce> {
        Ok(self.open::<Announce>(ANNOUNCE, payload)?.value)
    }

    pub fn seal_heartbeat(&self, run: &str, seq: u64, beat: &Heartbeat) -> Result<Vec<u8>> {
        self.seal(HEARTBEAT, run, seq, beat)
    }
}

pub const COMMAND: &str = "command";
pub const REPLY: &str = "reply";
pub const ANNOUNCE: &str = "announce";
pub const HEARTBEAT: &str = "heartbeat";
pub const BEAT: &str = "beat";
pub const CHUNK: &str = "chunk";

/// What a tag covers: the protocol, the kind, the run, the sequence and
/// the body, each length-prefixed so no bytes can move between fields.
fn tagged(kind: &str, run: &str, seq: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + kind.len() + run.len() + body.len());
    for field in [
        b"jsbench-worker-1".as_slice(),
        kind.as_bytes(),
        run.as_bytes(),
    ] {
        out.extend_from_slice(&(field.len() as u64).to_be_bytes());
        out.extend_from_slice(field);
    }
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&(body.len() as u64).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A message as it travels: the body is the value's JSON text exactly as
/// tagged, so nothing is re-encoded between sealing and checking.
#[derive(Debug, Serialize, Deserialize)]
pub struct Sealed {
    pub kind: String,
    pub run: String,
    pub seq: u64,
    pub body: String,
    pub mac: String,
}

/// A message whose tag checked out.
#[derive(Debug)]
pub struct Opened<T> {
    pub run: String,
    pub seq: u64,
    pub value: T,
}

/// The sending side of one run: its key, its run and the sequence every
/// sealed message takes the next number of, so numbers only move forward.
#[derive(Clone, Debug)]
pub struct Link {
    pub key: Key,
    pub run: String,
    seq: Arc<AtomicU64>,
}

impl Link {
    pub fn new(key: Key, run: &str) -> Link {
        Link {
            key,
            run: run.to_string(),
            seq: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The next sequence number: never one used before on this link.
    pub fn next(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// A command sealed with the next number, and that number (its reply
    /// must carry it).
    pub fn command(&self, command: &Command) -> Result<(u64, Vec<u8>)> {
        let seq = self.next();
        Ok((seq, self.key.seal_command(&self.run, seq, command)?))
    }
}

/// Accepts each sequence number once, in increasing order: a replayed
/// message, or one older than the last accepted, is refused.
#[derive(Debug, Default, Clone, Copy)]
pub struct Forward {
    last: u64,
}

impl Forward {
    pub fn new(last: u64) -> Forward {
        Forward { last }
    }

    /// Whether `seq` is new; takes it if it is.
    pub fn take(&mut self, seq: u64) -> bool {
        if seq > self.last {
            self.last = seq;
            true
        } else {
            false
        }
    }
}

/// A fresh random nonce, hex: a worker's token for one wait.
pub fn nonce() -> String {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system's random source works");
    hex(&bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || text.len() > 128 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::from_secret(s.as_bytes()).unwrap()
    }

    #[test]
    fn a_sealed_command_opens_only_with_the_same_secret_and_untouched() {
        let k = key("0123456789abcdef0123");
        let sealed = k.seal_command("run1", 7, &Command::Ping).unwrap();
        let opened: Opened<Command> = k.open(COMMAND, &sealed).unwrap();
        assert_eq!((opened.run.as_str(), opened.seq), ("run1", 7));
        assert!(matches!(opened.value, Command::Ping));
        let other = key("another secret, long enough");
        assert!(other.open::<Command>(COMMAND, &sealed).is_err());
        // The sequence, the run or the body changed: the tag no longer fits.
        let mut s: Sealed = serde_json::from_slice(&sealed).unwrap();
        s.seq = 8;
        assert!(
            k.open::<Command>(COMMAND, &serde_json::to_vec(&s).unwrap())
                .is_err()
        );
        s.seq = 7;
        s.body = serde_json::to_string(&Command::Adjust { ns: 5_000_000 }).unwrap();
        assert!(
            k.open::<Command>(COMMAND, &serde_json::to_vec(&s).unwrap())
                .is_err()
        );
        // A command is not a reply.
        assert!(k.open_reply("run1", 7, &sealed).is_err());
        // Without a secret nothing is checked: both sides must agree.
        assert!(Key::insecure().open::<Command>(COMMAND, &sealed).is_ok());
        let unsealed = Key::insecure()
            .seal_command("run1", 7, &Command::Ping)
            .unwrap();
        assert!(k.open::<Command>(COMMAND, &unsealed).is_err());
    }

    #[test]
    fn replies_and_chunks_are_bound_to_the_command_they_answer() {
        let k = key("0123456789abcdef0123");
        let reply = k.seal_reply("r", 3, &Reply::Ok).unwrap();
        assert!(k.open_reply("r", 3, &reply).is_ok());
        assert!(k.open_reply("r", 4, &reply).is_err());
        assert!(k.open_reply("s", 3, &reply).is_err());
        let chunk = k.seal_chunk("r", 5, b"Cabc");
        assert_eq!(k.open_chunk("r", 5, &chunk).unwrap(), b"Cabc");
        assert!(k.open_chunk("r", 6, &chunk).is_err());
        assert!(k.open_chunk("r", 5, &chunk[..10]).is_err());
    }

    #[test]
    fn sequences_only_move_forward_and_short_secrets_are_refused() {
        let mut f = Forward::new(3);
        assert!(!f.take(3));
        assert!(f.take(5));
        assert!(!f.take(4));
        assert!(!f.take(5));
        let e = Key::from_secret(b"short\n").unwrap_err();
        assert!(format!("{e:#}").contains(MAKE_SECRET), "{e:#}");
        assert_ne!(nonce(), nonce());
    }
}
