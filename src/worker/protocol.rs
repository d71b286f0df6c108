//! What coordinator and workers say to each other, on which subjects.
//!
//! Subjects live under `jsb.workers.<group>`: the group is the name both
//! sides agree on (`--group`, default `default`), so two benchmarks on one
//! cluster never recruit each other's workers. Once recruited, a worker's
//! progress goes to a subject scoped by the run's token as well.
//!
//! Messages are JSON (rare, small, and readable with `nats sub` when
//! something goes wrong), except a worker's results, which are deflated
//! JSON sent in chunks that fit the server's max_payload.

use serde::{Deserialize, Serialize};

use crate::consume::ConsumerReport;
use crate::drive::{DriveSpec, PublisherPart, Share};
use crate::system::error::UsageError;

/// Bumped whenever a message of this module changes shape: a worker and a
/// coordinator with different protocol versions cannot work together even
/// when their jsbench versions claim they can (a development build).
pub const PROTOCOL_VERSION: u32 = 4;

/// The group used when none is named.
pub const DEFAULT_GROUP: &str = "default";

pub fn announce_subject(group: &str) -> String {
    format!("jsb.workers.{group}.announce")
}

pub fn worker_subject(group: &str, worker: &str) -> String {
    format!("jsb.workers.{group}.w.{worker}")
}

pub fn progress_subject(group: &str, run: &str) -> String {
    format!("jsb.workers.{group}.run.{run}.progress")
}

pub fn beat_subject(group: &str, run: &str) -> String {
    format!("jsb.workers.{group}.run.{run}.beat")
}

/// Checks a group or worker name: one subject token of the characters
/// every NATS deployment accepts.
pub fn check_name(what: &str, name: &str) -> Result<(), UsageError> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(UsageError(format!(
            "{what} {name:?} is not usable: 1 to 64 letters, digits, '-' or '_' (it becomes a subject token)"
        )));
    }
    Ok(())
}

/// What must match between a coordinator and its workers: the same jsbench
/// (same measurement code, same results), the same results schema, the
/// same wire protocol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub jsbench_version: String,
    pub schema_version: u32,
    pub protocol_version: u32,
    pub git_commit: Option<String>,
}

impl Identity {
    pub fn current() -> Identity {
        let tool = crate::system::about::tool();
        Identity {
            jsbench_version: tool.version,
            schema_version: crate::system::about::SCHEMA_VERSION,
            protocol_version: PROTOCOL_VERSION,
            git_commit: tool.git_commit,
        }
    }

    /// What must match between the two sides, each named as messages say it.
    fn versions(&self) -> [(&'static str, String); 3] {
        [
            ("jsbench", self.jsbench_version.clone()),
            ("results schema", self.schema_version.to_string()),
            ("worker protocol", self.protocol_version.to_string()),
        ]
    }

    /// `None` when `other` can work with this side; otherwise what differs,
    /// in words both sides print. The git commit is not compared: two
    /// builds of one release on different hosts differ only in that.
    pub fn mismatch(&self, other: &Identity) -> Option<String> {
        let pairs = self.versions().into_iter().zip(other.versions());
        let differs: Vec<String> = pairs
            .filter(|((_, mine), (_, theirs))| mine != theirs)
            .map(|((what, mine), (_, theirs))| format!("{what} {theirs} against {mine}"))
            .collect();
        (!differs.is_empty()).then(|| differs.join(", "))
    }
}

/// A worker's self-introduction, repeated while it waits for a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Announce {
    pub id: String,
    pub identity: Identity,
    pub host: String,
    pub pid: u32,
    pub cores: usize,
    /// Fresh for each wait: a recruit or refusal must carry it, so one
    /// recorded earlier and replayed is refused ([`super::auth`]).
    pub nonce: String,
}

/// Coordinator to worker, as requests on the worker's subject.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Command {
    /// Join this run; `nonce` is the one the worker announced.
    Recruit {
        run: String,
        coordinator: Identity,
        nonce: String,
    },
    /// Published (not a request): this worker may not join, and why;
    /// `nonce` is the one the worker announced.
    Refuse { reason: String, nonce: String },
    /// A clock exchange: reply with receive and send times.
    Ping,
    /// Move the worker's time base by this much (ns).
    Adjust { ns: i64 },
    /// Connect the clients of this share; reply Ready once connected.
    Prepare {
        drive: u64,
        spec: Box<DriveSpec>,
        share: Share,
    },
    /// Start at `t0_ns` on the coordinator's time base.
    Go { drive: u64, t0_ns: u64 },
    /// Stop consuming and assemble the results.
    Stop { drive: u64 },
    /// One chunk of the results.
    Fetch { drive: u64, chunk: u32 },
    /// Stop publishing now, drain and keep the results: the coordinator
    /// was interrupted (Ctrl-C).
    Halt { drive: u64 },
    /// Give up the drive and its results: the coordinator's drive failed.
    Abort { drive: u64 },
    /// The run is over.
    Dismiss,
}

/// Worker to coordinator: replies to [`Command`]s.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    Ok,
    Joined,
    Refused { reason: String },
    Pong { received_ns: u64, sent_ns: u64 },
    Ready,
    Failed { error: String },
}

/// What a worker reports while it runs a share, several times a second:
/// counts for the coordinator's progress display and drain, and proof of
/// life (silence means the worker is gone).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    pub worker: String,
    /// The drive these counts belong to; 0 between drives.
    pub drive: u64,
    pub sent: u64,
    pub received: u64,
    pub finished: u64,
    pub in_flight: u64,
    /// Messages a PubAck confirmed stored.
    pub stored: u64,
    /// Every publisher of the share has finished.
    pub published: bool,
}

/// Everything a worker measured in one drive: the task reports exactly as
/// a single process would merge them, histograms and ledgers included.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartReport {
    pub worker: String,
    pub publishers: Vec<PublisherPart>,
    pub consumers: Vec<ConsumerReport>,
    pub errors: Vec<String>,
    pub client_cpu: crate::system::cpu::ClientCpu,
    /// This part's own ledger counts, for the per-process table.
    pub counts: PartCounts,
}

/// What one process did in a drive: only counts that add up across
/// processes. "Lost" or "redelivered" are not among them: a message
/// published here and delivered there, or delivered once here and once
/// there, is judged only in the merged ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartCounts {
    /// Publishes sent.
    pub published: u64,
    /// Publishes without a PubAck in time, or with an error.
    pub publish_errors: u64,
    /// Distinct sequences this process's PubAcks confirmed.
    pub persisted: u64,
    /// PubAcks flagged duplicate.
    pub duplicates: u64,
    /// Deliveries received, redeliveries included.
    pub deliveries: u64,
    /// Acks, naks and terms sent.
    pub acks: u64,
    pub naks: u64,
    pub terms: u64,
}

impl std::ops::AddAssign for PartCounts {
    fn add_assign(&mut self, o: PartCounts) {
        self.published += o.published;
        self.publish_errors += o.publish_errors;
        self.persisted += o.persisted;
        self.duplicates += o.duplicates;
        self.deliveries += o.deliveries;
        self.acks += o.acks;
        self.naks += o.naks;
        self.terms += o.terms;
    }
}

/// The most packed (deflated) results a coordinator takes from one worker
/// for one drive: far above what a drive's histograms, ledger shards and
/// delivery logs pack into, and a bound on what a worker, hostile or
/// broken, can make the coordinator hold.
pub const MAX_PACKED_RESULTS: usize = 256 * 1024 * 1024;

/// The most a worker's results may inflate to (JSON): four times the
/// packed cap. Deflate can inflate a thousandfold; this cap stops a small
/// bomb from taking the coordinator's memory.
pub const MAX_INFLATED_RESULTS: u64 = 1024 * 1024 * 1024;

/// The largest results chunk: what a worker sends at most (see its
/// `chunk_size`), well under any server's max_payload.
pub const MAX_CHUNK_BYTES: usize = 512 * 1024;

/// The most chunks a worker may say its results take: the packed cap in
/// the smallest chunks a worker sends (4 KiB).
pub const MAX_CHUNKS: u32 = (MAX_PACKED_RESULTS / 4096) as u32;

/// The longest error text a coordinator keeps from a worker.
pub const MAX_ERROR_TEXT: usize = 4096;

/// The result chunk replies: `C`, total chunks and index (u32 LE each),
/// bytes; `N` not ready yet; `E` and an error text.
pub mod chunk {
    use super::{MAX_CHUNK_BYTES, MAX_CHUNKS, MAX_PACKED_RESULTS};

    pub const DATA: u8 = b'C';
    pub const NOT_READY: u8 = b'N';
    pub const ERROR: u8 = b'E';

    pub fn data(total: u32, index: u32, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(9 + bytes.len());
        out.push(DATA);
        out.extend_from_slice(&total.to_le_bytes());
        out.extend_from_slice(&index.to_le_bytes());
        out.extend_from_slice(bytes);
        out
    }

    /// `(total, index, bytes)` of a data chunk.
    pub fn parse(payload: &[u8]) -> Option<(u32, u32, &[u8])> {
        if payload.len() < 9 || payload[0] != DATA {
            return None;
        }
        let total = u32::from_le_bytes(payload[1..5].try_into().ok()?);
        let index = u32::from_le_bytes(payload[5..9].try_into().ok()?);
        Some((total, index, &payload[9..]))
    }

    /// Why a data chunk is refused before it is kept, if it is: not the
    /// one asked for, more chunks than [`MAX_CHUNKS`], a chunk above
    /// [`MAX_CHUNK_BYTES`], or results (`held` so far) beyond
    /// [`MAX_PACKED_RESULTS`]. A worker's own `total` must not decide how
    /// much the coordinator collects.
    pub fn check(total: u32, index: u32, asked: u32, data: &[u8], held: usize) -> Option<String> {
        if index != asked {
            return Some(format!("sent chunk {index} when asked for {asked}"));
        }
        if total == 0 || total > MAX_CHUNKS {
            return Some(format!(
                "said its results take {total} chunks; 1 to {MAX_CHUNKS} are taken (at most {} MiB)",
                MAX_PACKED_RESULTS >> 20
            ));
        }
        if data.len() > MAX_CHUNK_BYTES {
            return Some(format!(
                "sent a results chunk of {} bytes; at most {MAX_CHUNK_BYTES} are taken",
                data.len()
            ));
        }
        if held + data.len() > MAX_PACKED_RESULTS {
            return Some(format!(
                "sent more than {} MiB of results; the rest is refused",
                MAX_PACKED_RESULTS >> 20
            ));
        }
        None
    }
}

/// Deflated JSON: a worker's results are mostly histograms (already
/// compressed) and ledgers (runs of equal counts), and JSON's repetition
/// of field names compresses away.
pub fn pack<T: Serialize>(value: &T) -> anyhow::Result<Vec<u8>> {
    use std::io::Write as _;
    let json = serde_json::to_vec(value)?;
    let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(&json)?;
    Ok(z.finish()?)
}

/// Inflates and parses a worker's results, refusing more than
/// [`MAX_INFLATED_RESULTS`] before holding it.
pub fn unpack<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> anyhow::Result<T> {
    use anyhow::Context as _;
    use std::io::Read as _;
    let mut json = Vec::new();
    flate2::read::DeflateDecoder::new(bytes)
        .take(MAX_INFLATED_RESULTS + 1)
        .read_to_end(&mut json)
        .context("worker results do not inflate")?;
    if json.len() as u64 > MAX_INFLATED_RESULTS {
        anyhow::bail!(
            "worker results inflate beyond {} MiB; refused",
            MAX_INFLATED_RESULTS >> 20
        );
    }
    serde_json::from_slice(&json).context("worker results do not parse")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(version: &str, schema: u32) -> Identity {
        Identity {
            jsbench_version: version.into(),
            schema_version: schema,
            protocol_version: PROTOCOL_VERSION,
            git_commit: None,
        }
    }

    #[test]
    fn a_different_version_or_schema_is_named() {
        let me = identity("0.1.0", 1);
        assert_eq!(me.mismatch(&identity("0.1.0", 1)), None);
        let mut other_commit = identity("0.1.0", 1);
        other_commit.git_commit = Some("abc".into());
        assert_eq!(me.mismatch(&other_commit), None);
        assert_eq!(
            me.mismatch(&identity("0.2.0", 1)).unwrap(),
            "jsbench 0.2.0 against 0.1.0"
        );
        assert_eq!(
            me.mismatch(&identity("0.1.0", 2)).unwrap(),
            "results schema 2 against 1"
        );
    }

    #[test]
    fn chunks_and_packs_round_trip() {
        let bytes = chunk::data(3, 1, b"abc");
        assert_eq!(chunk::parse(&bytes), Some((3, 1, &b"abc"[..])));
        assert_eq!(chunk::parse(&[chunk::NOT_READY]), None);
        let progress = Heartbeat {
            worker: "w".into(),
            drive: 2,
            sent: 10,
            ..Default::default()
        };
        let back: Heartbeat = unpack(&pack(&progress).unwrap()).unwrap();
        assert_eq!(back, progress);
    }

    /// Issue 51: a worker's own `total` set how many chunks the
    /// coordinator collected (10^9 of them: all its memory), and results
    /// inflated without a limit. Both are cut off now (the inflation cap,
    /// 1 GiB, is left untested here: proving it takes 1 GiB).
    #[test]
    fn a_worker_announcing_a_billion_chunks_is_cut_off() {
        let e = chunk::check(1_000_000_000, 0, 0, b"abc", 0).unwrap();
        assert!(e.contains("1000000000 chunks"), "{e}");
        assert_eq!(chunk::check(3, 1, 1, b"abc", 0), None);
        assert!(chunk::check(3, 2, 1, b"abc", 0).is_some());
        assert!(chunk::check(3, 1, 1, b"abc", MAX_PACKED_RESULTS).is_some());
        assert!(chunk::check(3, 1, 1, &vec![0; MAX_CHUNK_BYTES + 1], 0).is_some());
    }

    #[test]
    fn names_must_be_one_subject_token() {
        assert!(check_name("--group", "bench-1_a").is_ok());
        assert!(
            check_name("--group", "a.b")
                .unwrap_err()
                .0
                .contains("\"a.b\"")
        );
        assert!(check_name("--group", "").is_err());
        assert!(check_name("--group", "a*").is_err());
    }
}
