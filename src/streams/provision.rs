//! Streams and consumers jsbench creates, under run-scoped names, and the
//! promise to remove them again.
//!
//! jsbench is run against shared staging clusters, so it only ever creates
//! streams whose names carry its run id, never updates or deletes anything it
//! did not create, and deletes what it created when the run ends (unless
//! asked to keep it), Ctrl-C and failed scenarios included.

use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use async_nats::jetstream::{self, consumer, stream};
use serde::{Deserialize, Serialize};

use crate::profile::{
    AckPolicy, CommonPlan, Compression, ConsumerKind, ConsumerPlan, Discard, PacedLoad,
    PersistMode, PublishPlan, Retention, ServerPlan, Storage, StreamPlan, StreamSettings,
};

/// Where a stream's replicas live, from stream info at the end of a variant:
/// replication is part of what a latency number measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamPlacement {
    pub stream: String,
    /// Configured replicas.
    pub replicas: usize,
    /// Storage as the server reports it (`file`, `memory`).
    pub storage: Option<String>,
    /// Persist mode as the server reports it: `async`, or `default`
    /// (the server leaves the field out then).
    pub persist_mode: Option<String>,
    pub cluster: Option<String>,
    pub leader: Option<String>,
    /// The other replicas, as the leader sees them.
    pub peers: Vec<PeerInfo>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerInfo {
    pub name: String,
    pub current: bool,
    /// Operations behind the leader.
    pub lag: u64,
    /// Time since the leader last heard from it, in milliseconds.
    pub active_ms: f64,
}

/// A run-scoped stream on `<base>.*` with the profile's replicas and the
/// variant's stream settings (storage, discard, limits, placement): every
/// scenario's stream under test starts from this.
pub fn stream_config(
    name: &str,
    base: &str,
    server: &ServerPlan,
    settings: &StreamSettings,
) -> stream::Config {
    let l = &settings.limits;
    stream::Config {
        name: name.to_string(),
        subjects: vec![format!("{base}.*")],
        storage: storage_type(settings.storage.unwrap_or(server.storage)),
        num_replicas: server.replicas,
        retention: match settings.retention {
            Some(Retention::Workqueue) => stream::RetentionPolicy::WorkQueue,
            Some(Retention::Interest) => stream::RetentionPolicy::Interest,
            Some(Retention::Limits) | None => stream::RetentionPolicy::Limits,
        },
        discard: match settings.discard {
            Some(Discard::New) => stream::DiscardPolicy::New,
            Some(Discard::Old) | None => stream::DiscardPolicy::Old,
        },
        discard_new_per_subject: l.discard_new_per_subject,
        max_age: l.max_age.unwrap_or_default(),
        max_messages: l.max_msgs.unwrap_or(-1),
        max_bytes: l
            .max_bytes
            .map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX)),
        max_messages_per_subject: l.max_msgs_per_subject.unwrap_or(-1),
        max_message_size: l
            .max_msg_size
            .map_or(-1, |b| i32::try_from(b).unwrap_or(i32::MAX)),
        duplicate_window: l.duplicate_window.unwrap_or_default(),
        compression: l.compression.map(|c| match c {
            Compression::None => stream::Compression::None,
            Compression::S2 => stream::Compression::S2,
        }),
        allow_direct: l.allow_direct.unwrap_or(false),
        placement: l.placement.as_ref().map(|p| stream::Placement {
            cluster: p.cluster.clone(),
            tags: p.tags.clone(),
        }),
        // "default" is sent as such: a server that does not know the field
        // then refuses it rather than silently persisting otherwise.
        persist_mode: settings.persist.map(|p| match p {
            PersistMode::Default => stream::PersistenceMode::Default,
            PersistMode::Async => stream::PersistenceMode::Async,
        }),
        ..Default::default()
    }
}

/// The API's storage type for a profile's.
pub fn storage_type(storage: Storage) -> stream::StorageType {
    match storage {
        Storage::File => stream::StorageType::File,
        Storage::Memory => stream::StorageType::Memory,
    }
}

/// The durable's server-side configuration from a consumer plan, pull or
/// push as its kind says; `base` is the scenario's subject prefix its
/// filter suffix extends, and a push durable's deliver subject is beside
/// it (`<base>_deliver.<durable>`, outside the stream's `<base>.*`).
pub fn durable_config(durable: &str, plan: &ConsumerPlan, base: &str) -> consumer::Config {
    let push = plan.kind == ConsumerKind::Push;
    consumer::Config {
        durable_name: Some(durable.to_string()),
        ack_policy: match plan.ack {
            AckPolicy::None => consumer::AckPolicy::None,
            AckPolicy::All => consumer::AckPolicy::All,
            AckPolicy::Explicit => consumer::AckPolicy::Explicit,
        },
        ack_wait: plan.ack_wait,
        backoff: plan.backoff.clone(),
        max_deliver: plan.max_deliver,
        max_ack_pending: plan.max_ack_pending,
        filter_subject: plan
            .filter
            .as_ref()
            .map(|f| format!("{base}.{f}"))
            .unwrap_or_default(),
        deliver_policy: consumer::DeliverPolicy::All,
        // Pull requests wait on a pull durable only.
        max_waiting: plan.max_waiting.filter(|_| !push).unwrap_or_default(),
        deliver_subject: push.then(|| format!("{base}_deliver.{durable}")),
        deliver_group: (push && plan.push.queue).then(|| durable.to_string()),
        flow_control: push && plan.push.flow_control,
        // The server requires heartbeats with flow control.
        idle_heartbeat: match plan.pull.idle_heartbeat {
            Some(beat) if push => beat,
            _ if push && plan.push.flow_control => PUSH_HEARTBEAT,
            _ => Duration::ZERO,
        },
        rate_limit: plan.push.rate_limit.filter(|_| push).unwrap_or(0),
        ..Default::default()
    }
}

/// What every stream and bucket jsbench creates says of itself.
const DESCRIPTION: &str = "created by jsbench; deleted when its run ends";

/// A push durable's idle heartbeat when flow control needs one and the
/// profile names none.
const PUSH_HEARTBEAT: Duration = Duration::from_secs(5);

/// How long a replicated stream create waits for a peer the meta leader
/// still counts offline ([`Provisioner::create_placed`]).
const PEER_OFFLINE_WAIT: Duration = Duration::from_secs(30);

/// Run-scoped names: every stream, subject and durable of one run shares the
/// run token, so runs never collide and their leftovers are recognisable.
#[derive(Debug, Clone)]
pub struct Names {
    token: String,
}

impl Names {
    /// A fresh token: UTC time of day plus 24 random bits, e.g. `101839A1B2C3`.
    pub fn generate() -> Self {
        let now = time::OffsetDateTime::now_utc();
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Names {
            token: format!(
                "{:02}{:02}{:02}{:06X}",
                now.hour(),
                now.minute(),
                now.second(),
                random & 0xFF_FFFF
            ),
        }
    }

    pub fn from_token(token: &str) -> Self {
        Names {
            token: token.to_string(),
        }
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// `JSB_<token>_<scenario>_<variant>`.
    pub fn stream(&self, scenario: &str, variant: &str) -> String {
        sanitize(&format!("JSB_{}_{scenario}_{variant}", self.token)).to_uppercase()
    }

    /// `jsb.<token>.<scenario>.<variant>`: one subject per variant.
    pub fn subject(&self, scenario: &str, variant: &str) -> String {
        format!(
            "jsb.{}.{}.{}",
            self.token.to_lowercase(),
            sanitize(scenario),
            sanitize(variant)
        )
    }

    /// `jsb_<scenario>_<variant>`: unique within its stream.
    pub fn durable(&self, scenario: &str, variant: &str) -> String {
        sanitize(&format!("jsb_{scenario}_{variant}"))
    }
}

/// Keeps letters, digits, '-' and '_', the characters valid in stream,
/// consumer and subject-token names alike (a `msg_id_prefix`, unique per
/// run, scenario and variant, as one subject token of the trace events);
/// anything else becomes '_'.
pub fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Creates streams and consumers, and remembers the streams so they are
/// deleted on every way out of a run.
pub struct Provisioner {
    js: jetstream::Context,
    created: Mutex<Vec<String>>,
    keep: bool,
    /// The max_bytes of every stream that sets none, when the account
    /// requires one ([`size_max_bytes`]).
    max_bytes: Option<u64>,
}

impl Provisioner {
    pub fn new(js: jetstream::Context, keep: bool) -> Self {
        Provisioner {
            js,
            created: Mutex::new(Vec::new()),
            keep,
            max_bytes: None,
        }
    }

    /// Gives every stream created without a max_bytes this one: all of a
    /// run's streams pass through [`Provisioner::create_stream`], so an
    /// account that requires max_bytes is served in one place.
    pub fn with_max_bytes(mut self, max_bytes: Option<u64>) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    /// Whether streams are kept when their run is done (`--keep`).
    pub fn keeps(&self) -> bool {
        self.keep
    }

    /// Creates a stream that must not exist yet: an existing stream of the
    /// same name belongs to someone else and is left alone.
    pub async fn create_stream(&self, mut config: stream::Config) -> Result<stream::Stream> {
        let name = config.name.clone();
        if config.description.is_none() {
            config.description = Some(DESCRIPTION.into());
        }
        if config.max_bytes <= 0
            && let Some(max) = self.max_bytes
        {
            config.max_bytes = i64::try_from(max).unwrap_or(i64::MAX);
        }
        self.refuse_taken(&name).await?;
        let replicas = config.num_replicas;
        let stream = self.create_placed(config).await.map_err(|e| {
            let hint = if replicas > 1 && e.to_string().contains("insufficient resources") {
                format!(
                    "; {replicas} replicas need {replicas} JetStream servers in the cluster \
                     (a local one: --cluster {replicas}; or --replicas 1)"
                )
            } else {
                String::new()
            };
            anyhow!("creating stream {name} with {replicas} replica(s): {e}{hint}")
        })?;
        self.list().push(name);
        Ok(stream)
    }

    /// Creates the stream, waiting out a peer the meta leader still counts
    /// offline: a node back from a cut rejoins its routes at once but is
    /// counted online again only later, and until then a replicated stream
    /// is refused with "no suitable peers for placement, peer offline"
    /// (10005; the `kill` variant's first stream, right after the `cut`
    /// variant healed its node, on the local cluster, even once /jsz
    /// showed every peer current). Any other refusal, or one lasting
    /// [`PEER_OFFLINE_WAIT`], is returned.
    async fn create_placed(
        &self,
        config: stream::Config,
    ) -> Result<stream::Stream, jetstream::context::CreateStreamError> {
        let started = tokio::time::Instant::now();
        loop {
            match self.js.create_stream(config.clone()).await {
                Err(e)
                    if e.to_string().contains("peer offline")
                        && started.elapsed() < PEER_OFFLINE_WAIT =>
                {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                other => return other,
            }
        }
    }

    /// Creates a key-value bucket (its stream `KV_<bucket>` deleted with
    /// the run's streams): an idempotent consumer's dedup store.
    pub async fn create_kv(&self, bucket: &str) -> Result<()> {
        let stream = format!("KV_{bucket}");
        self.refuse_taken(&stream).await?;
        self.js
            .create_key_value(async_nats::jetstream::kv::Config {
                bucket: bucket.to_string(),
                description: DESCRIPTION.into(),
                history: 1,
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow!("creating key-value bucket {bucket}: {e}"))?;
        self.list().push(stream);
        Ok(())
    }

    /// Creates a durable, pull or push ([`durable_config`]).
    pub async fn create_consumer(
        &self,
        stream: &stream::Stream,
        config: consumer::Config,
        pedantic: bool,
    ) -> Result<()> {
        let name = config.durable_name.clone().unwrap_or_default();
        if pedantic {
            let stream_name = stream.cached_info().config.name.clone();
            return self
                .create_pedantic(&stream_name, config)
                .await
                .with_context(|| format!("creating durable consumer {name} (pedantic)"));
        }
        stream
            .create_consumer(config)
            .await
            .map(|_| ())
            .with_context(|| format!("creating durable consumer {name}"))
    }

    /// The consumer-create request with `"pedantic": true`, which async-nats
    /// has no call for: the server then answers a config it would change
    /// (AckWait to BackOff[0]) with error 10157 instead of creating it.
    async fn create_pedantic(&self, stream: &str, config: consumer::Config) -> Result<()> {
        let name = config.durable_name.clone().unwrap_or_default();
        let request = serde_json::json!({
            "stream_name": stream,
            "config": config,
            "action": "create",
            "pedantic": true,
        });
        let answer: async_nats::jetstream::response::Response<serde_json::Value> = self
            .js
            .request(format!("CONSUMER.CREATE.{stream}.{name}"), &request)
            .await
            .context("sending the create request")?;
        match answer {
            async_nats::jetstream::response::Response::Ok(_) => Ok(()),
            async_nats::jetstream::response::Response::Err { error } => Err(anyhow::anyhow!(
                "the server refused it: {error}; in pedantic mode it refuses what it would \
                 otherwise change, e.g. an ack_wait other than backoff[0]"
            )),
        }
    }

    /// Deletes one stream this run created (a variant is done with it).
    pub async fn delete_stream(&self, name: &str) -> Result<()> {
        if self.keep {
            return Ok(());
        }
        self.delete_stream_anyway(name).await.map(|_| ())
    }

    /// Deletes one stream this run created even with `--keep`: one whose
    /// subjects every later variant needs (an account-wide advisory
    /// capture) would make each of them fail with overlapping subjects.
    /// Returns whether `--keep` was overridden, for the results to say.
    pub async fn delete_stream_anyway(&self, name: &str) -> Result<bool> {
        self.js
            .delete_stream(name)
            .await
            .with_context(|| format!("deleting stream {name}"))?;
        self.list().retain(|n| n != name);
        Ok(self.keep)
    }

    /// Deletes every stream this run created and has not deleted yet;
    /// returns what could not be deleted.
    pub async fn teardown(&self) -> Vec<String> {
        if self.keep {
            return Vec::new();
        }
        let names = self.created();
        let mut failures = Vec::new();
        for name in names {
            if let Err(e) = self.delete_stream(&name).await {
                failures.push(format!("{e:#}"));
            }
        }
        failures
    }

    /// A stream's info now (message count, placement), or why the server
    /// did not give it: a check built on it fails with that error, never
    /// reads as "not applicable". No caller tells a stream not found from
    /// another failure: each asks of a stream it created.
    pub async fn stream_info(&self, name: &str) -> Result<stream::Info> {
        let mut stream = (self.js.get_stream(name).await)
            .with_context(|| format!("looking up stream {name}"))?;
        let info =
            (stream.info().await).with_context(|| format!("reading stream {name}'s info"))?;
        Ok(info.clone())
    }

    /// Streams created and still present (kept, or not yet torn down).
    pub fn created(&self) -> Vec<String> {
        self.list().clone()
    }

    /// An existing stream of that name belongs to someone else: an error.
    async fn refuse_taken(&self, name: &str) -> Result<()> {
        if self.js.get_stream(name).await.is_ok() {
            return Err(anyhow!(
                "stream {name} already exists; jsbench never touches streams it did not create"
            ));
        }
        Ok(())
    }

    fn list(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.created.lock().expect("not poisoned")
    }
}

/// What a profile puts into the account at most at once: jsbench creates
/// one stream and one durable per variant and deletes them before the next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    pub streams: usize,
    pub consumers: usize,
    /// Stored bytes of the largest variant's largest stream, one replica.
    pub bytes: u64,
    /// Stored bytes of the largest variant over all its streams, one
    /// replica: `bytes` but for a fanout, whose streams share its load.
    pub total_bytes: u64,
    pub max_ack_pending: i64,
    /// Storage kinds `[scenario.stream]` lists name, beyond the profile's.
    pub file: bool,
    pub memory: bool,
}

impl Footprint {
    /// Whether some variant's stream uses `storage` (`default`: the
    /// profile's `[server]` storage, which a scenario without a list uses).
    pub fn uses(&self, storage: Storage, default: Storage) -> bool {
        storage == default
            || match storage {
                Storage::File => self.file,
                Storage::Memory => self.memory,
            }
    }
}

/// Bytes a stored message costs beyond its payload: subject, headers and
/// the store's own record (an estimate; dedup ids add about 40 more).
pub const PER_MESSAGE_OVERHEAD: u64 = 100;

/// What a "max" rate may reach, for sizing only: more than this machine's
/// kind has been measured to publish.
pub const MAX_RATE_ESTIMATE: f64 = 500_000.0;

/// What one scenario puts into the account at most at once: its largest
/// variant's streams, consumers and stored bytes, and the MaxAckPending
/// its durables ask for. Each kind says its own (the registry row's
/// sizing); most are [`Need::paced`]. The default needs nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Need {
    pub streams: usize,
    pub consumers: usize,
    /// Stored bytes of the largest stream, one replica.
    pub bytes: u64,
    /// Stored bytes over all the variant's streams, one replica: `bytes`
    /// but for a fan-out, whose streams share its load.
    pub total_bytes: u64,
    pub max_ack_pending: i64,
}

impl Need {
    /// One stream storing `bytes`, and one durable.
    pub fn one_stream(bytes: u64) -> Need {
        Need {
            streams: 1,
            consumers: 1,
            bytes,
            total_bytes: bytes,
            max_ack_pending: 0,
        }
    }

    /// One stream and one durable: `rate` msg/s of `publish`'s mean size
    /// for the scenario's warm-up and duration, read with `max_ack_pending`.
    pub fn paced(
        rate: f64,
        common: &CommonPlan,
        publish: &PublishPlan,
        max_ack_pending: i64,
    ) -> Need {
        Need {
            max_ack_pending,
            ..Need::one_stream(stored_bytes(rate, common, publish))
        }
    }

    /// The shared paced load's: its rate, its publishers, its durable.
    pub fn of_load(load: &PacedLoad, common: &CommonPlan) -> Need {
        Need::paced(
            load.rate as f64,
            common,
            &load.publish,
            load.consumer.max_ack_pending,
        )
    }
}

/// What `rate` msg/s of `publish`'s mean size store over the scenario's
/// warm-up and duration, one replica.
pub fn stored_bytes(rate: f64, common: &CommonPlan, publish: &PublishPlan) -> u64 {
    let span = (common.warmup + common.duration).as_secs_f64();
    (rate * span) as u64 * (publish.message_size.mean() as u64 + PER_MESSAGE_OVERHEAD)
}

impl Footprint {
    /// A profile's footprint: the largest need of its scenarios (each runs
    /// alone, and deletes what it made), with the storage kinds their
    /// `[scenario.stream]` lists name.
    pub fn of<'a>(scenarios: impl IntoIterator<Item = (Need, &'a StreamPlan)>) -> Footprint {
        let mut need = Footprint {
            streams: 1,
            consumers: 1,
            ..Footprint::default()
        };
        for (n, stream) in scenarios {
            for storage in &stream.storage {
                match storage {
                    Storage::File => need.file = true,
                    Storage::Memory => need.memory = true,
                }
            }
            need.streams = need.streams.max(n.streams);
            need.consumers = need.consumers.max(n.consumers);
            need.bytes = need.bytes.max(n.bytes);
            need.total_bytes = need.total_bytes.max(n.total_bytes).max(n.bytes);
            need.max_ack_pending = need.max_ack_pending.max(n.max_ack_pending);
        }
        need
    }
}

/// Checks the account's JetStream limits against what a profile needs,
/// before anything is created: on a shared cluster a run that fills the
/// account's storage halfway through hurts everyone else in the account.
/// Returns every limit that is too small.
pub fn check_account(
    account: &jetstream::account::Account,
    need: &Footprint,
    server: &ServerPlan,
) -> Vec<String> {
    let mut problems = Vec::new();
    let l = &account.limits;
    for (what, max, has, needs) in [
        ("streams", l.max_streams, account.streams, need.streams),
        (
            "consumers",
            l.max_consumers,
            account.consumers,
            need.consumers,
        ),
    ] {
        if let Some(max) = max
            && has as i64 + needs as i64 > max
        {
            problems.push(format!(
                "the account allows {max} {what} and already has {has}; jsbench needs {needs} more"
            ));
        }
    }
    // Every storage a variant's stream uses: the profile's, and those its
    // [scenario.stream] lists name.
    for storage in [Storage::File, Storage::Memory] {
        if need.uses(storage, server.storage) {
            let on = ServerPlan { storage, ..*server };
            problems.extend(check_storage(account, need, &on));
        }
    }
    if l.max_ack_pending > 0 && need.max_ack_pending > l.max_ack_pending {
        problems.push(format!(
            "the account allows max_ack_pending up to {}; the profile asks for {} \
             (consumer.max_ack_pending)",
            l.max_ack_pending, need.max_ack_pending
        ));
    }
    problems
}

/// The limits of one storage kind against what the profile stores there.
fn check_storage(
    account: &jetstream::account::Account,
    need: &Footprint,
    server: &ServerPlan,
) -> Vec<String> {
    let mut problems = Vec::new();
    let (limit, used, reserved_before, per_stream, kind) = storage_side(account, server.storage);
    let replicated = need.total_bytes * server.replicas as u64;
    if let Some(max) = limit
        && used + replicated > max as u64
    {
        problems.push(format!(
            "the account has {} of {kind} left ({} used of {}); the largest variant stores about {} \
             ({} replica(s)): lower its rate, duration or message_size",
            mib(max as u64 - used.min(max as u64)),
            mib(used),
            mib(max as u64),
            mib(replicated),
            server.replicas
        ));
    }
    if let Some(max) = per_stream
        && need.bytes > max
    {
        problems.push(format!(
            "the account caps a stream at {} of {kind}; the largest variant stores about {}",
            mib(max),
            mib(need.bytes)
        ));
    }
    if let Some(sized) = size_max_bytes(account, need, server) {
        // nats-server holds a stream's max_bytes (times its replicas)
        // against the account's limit when the stream is created, beside
        // what earlier streams reserved.
        let reserved = sized.bytes * need.streams as u64 * server.replicas as u64;
        let used = used.max(reserved_before);
        if let Some(max) = limit
            && used + reserved > max as u64
        {
            problems.push(format!(
                "the account requires max_bytes on every stream; jsbench sets {} per stream ({}), \
                 and its {} stream(s) at once, {} replica(s), would reserve {} of the {} of {kind} \
                 left: lower the largest variant's rate, duration or message_size",
                mib(sized.bytes),
                sized.basis(),
                need.streams,
                server.replicas,
                mib(reserved),
                mib(max as u64 - used.min(max as u64)),
            ));
        }
    }
    problems
}

/// How far above the largest variant's expected volume jsbench sets a
/// required max_bytes: the volume is an estimate (a `max` rate is guessed
/// high, per-message overhead approximated), and a stream that reaches its
/// max_bytes evicts (discard old) what the run still has to verify.
const MAX_BYTES_MARGIN: u64 = 2;

/// The smallest max_bytes jsbench sets: tiny profiles still leave room for
/// the store's own records.
const MAX_BYTES_FLOOR: u64 = 16 << 20;

/// The max_bytes jsbench puts on the streams of a run whose account
/// requires one (nats-server's `max_bytes_required`), and how it was
/// obtained: the summary says so, since it is a limit the run measured
/// under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizedMaxBytes {
    /// Set on every stream the run creates without one.
    pub bytes: u64,
    /// The largest variant's expected stored bytes, one replica.
    pub expected: u64,
    /// The account's per-stream cap, when it lowered `bytes`.
    pub capped_by_account: bool,
}

impl SizedMaxBytes {
    /// How `bytes` was chosen, for messages and the summary.
    pub fn basis(&self) -> String {
        if self.capped_by_account {
            format!(
                "the account's per-stream cap; the largest variant expects {}",
                mib(self.expected)
            )
        } else {
            format!(
                "{MAX_BYTES_MARGIN}x the largest variant's expected {}, at least {}",
                mib(self.expected),
                mib(MAX_BYTES_FLOOR)
            )
        }
    }
}

/// Sizes max_bytes for an account that requires it; `None` when it does
/// not (jsbench then leaves streams unlimited, as before).
pub fn size_max_bytes(
    account: &jetstream::account::Account,
    need: &Footprint,
    server: &ServerPlan,
) -> Option<SizedMaxBytes> {
    let l = &account.limits;
    if !l.max_bytes_required {
        return None;
    }
    let wanted = (need.bytes * MAX_BYTES_MARGIN).max(MAX_BYTES_FLOOR);
    let per_stream = storage_side(account, server.storage).3;
    let bytes = per_stream.map_or(wanted, |cap| wanted.min(cap));
    Some(SizedMaxBytes {
        bytes,
        expected: need.bytes,
        capped_by_account: bytes < wanted,
    })
}

/// One storage kind's side of `account`: its limit, what it uses, what
/// its streams reserved, its per-stream cap (none when 0) and its name.
fn storage_side(
    account: &jetstream::account::Account,
    storage: Storage,
) -> (Option<i64>, u64, u64, Option<u64>, &'static str) {
    let l = &account.limits;
    let (limit, used, reserved, cap, kind) = match storage {
        Storage::File => (
            l.max_storage,
            account.storage,
            account.reserved_storage,
            l.storage_max_stream_bytes,
            "file storage",
        ),
        Storage::Memory => (
            l.max_memory,
            account.memory,
            account.reserved_memory,
            l.memory_max_stream_bytes,
            "memory storage",
        ),
    };
    let cap = cap.filter(|m| *m > 0).map(|m| m as u64);
    (limit, used, reserved, cap, kind)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// Leader and replicas of a stream, as its info reports them.
pub fn placement(info: &stream::Info) -> StreamPlacement {
    let cluster = info.cluster.as_ref();
    StreamPlacement {
        stream: info.config.name.clone(),
        replicas: info.config.num_replicas,
        storage: Some(
            match info.config.storage {
                stream::StorageType::File => "file",
                stream::StorageType::Memory => "memory",
            }
            .into(),
        ),
        persist_mode: Some(
            match info.config.persist_mode {
                Some(stream::PersistenceMode::Async) => "async",
                Some(stream::PersistenceMode::Default) | None => "default",
            }
            .into(),
        ),
        cluster: cluster.and_then(|c| c.name.clone()),
        leader: cluster.and_then(|c| c.leader.clone()),
        peers: cluster
            .map(|c| {
                c.replicas
                    .iter()
                    .map(|p| PeerInfo {
                        name: p.name.clone(),
                        current: p.current && !p.offline,
                        lag: p.lag.unwrap_or(0),
                        active_ms: p.active.as_secs_f64() * 1e3,
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_run_scoped_and_valid() {
        let n = Names::from_token("101839ABCDEF");
        assert_eq!(
            n.stream("latency", "rate-1000"),
            "JSB_101839ABCDEF_LATENCY_RATE-1000"
        );
        assert_eq!(
            n.subject("latency", "rate-1000"),
            "jsb.101839abcdef.latency.rate-1000"
        );
        assert_eq!(n.durable("latency", "rate.1"), "jsb_latency_rate_1");
        let a = Names::generate();
        let b = Names::generate();
        assert_ne!(a.token(), b.token(), "two runs in the same second differ");
        assert_eq!(a.token().len(), 12);
    }

    fn account(limits: jetstream::account::Limits) -> jetstream::account::Account {
        jetstream::account::Account {
            limits,
            ..Default::default()
        }
    }

    fn need(bytes: u64) -> Footprint {
        Footprint {
            streams: 3,
            consumers: 1,
            bytes,
            total_bytes: bytes,
            max_ack_pending: 0,
            file: false,
            memory: false,
        }
    }

    const FILE_R1: ServerPlan = ServerPlan {
        storage: Storage::File,
        replicas: 1,
        sync: None,
    };

    #[test]
    fn max_bytes_is_sized_only_when_the_account_requires_it() {
        let free = account(Default::default());
        assert_eq!(size_max_bytes(&free, &need(100 << 20), &FILE_R1), None);
        let strict = account(jetstream::account::Limits {
            max_bytes_required: true,
            ..Default::default()
        });
        let sized = size_max_bytes(&strict, &need(100 << 20), &FILE_R1).unwrap();
        assert_eq!(sized.bytes, 200 << 20, "twice the expected volume");
        assert_eq!(sized.expected, 100 << 20);
        assert!(!sized.capped_by_account);
        assert!(sized.basis().contains("2x"), "{}", sized.basis());
        // A tiny profile still gets room for the store's own records.
        let small = size_max_bytes(&strict, &need(1000), &FILE_R1).unwrap();
        assert_eq!(small.bytes, MAX_BYTES_FLOOR);
        assert!(check_account(&strict, &need(100 << 20), &FILE_R1).is_empty());
    }

    #[test]
    fn a_per_stream_cap_lowers_max_bytes_and_a_full_account_refuses_the_run() {
        let capped = account(jetstream::account::Limits {
            max_bytes_required: true,
            storage_max_stream_bytes: Some(150 << 20),
            ..Default::default()
        });
        let sized = size_max_bytes(&capped, &need(100 << 20), &FILE_R1).unwrap();
        assert_eq!(sized.bytes, 150 << 20);
        assert!(sized.capped_by_account);
        assert!(
            sized.basis().contains("per-stream cap"),
            "{}",
            sized.basis()
        );

        // 3 streams of 200 MiB reserve 600 MiB; the account has 500 MiB.
        let small = account(jetstream::account::Limits {
            max_bytes_required: true,
            max_storage: Some(500 << 20),
            ..Default::default()
        });
        let problems = check_account(&small, &need(100 << 20), &FILE_R1);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("requires max_bytes") && problems[0].contains("600.0 MiB"),
            "{problems:?}"
        );
        // What other streams reserved counts, not only what they store.
        let mut reserved = account(jetstream::account::Limits {
            max_bytes_required: true,
            max_storage: Some(700 << 20),
            ..Default::default()
        });
        assert!(check_account(&reserved, &need(100 << 20), &FILE_R1).is_empty());
        reserved.reserved_storage = 200 << 20;
        assert_eq!(
            check_account(&reserved, &need(100 << 20), &FILE_R1).len(),
            1
        );
    }

    #[test]
    fn a_memory_variant_is_checked_against_memory_limits_on_a_file_profile() {
        let no_memory = account(jetstream::account::Limits {
            max_memory: Some(1 << 20),
            ..Default::default()
        });
        assert!(check_account(&no_memory, &need(100 << 20), &FILE_R1).is_empty());
        let with_memory = Footprint {
            memory: true,
            ..need(100 << 20)
        };
        let problems = check_account(&no_memory, &with_memory, &FILE_R1);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("memory storage"), "{problems:?}");
    }
}
