//! `power`: what a PubAck survives. Every variant starts a server of its
//! own whose JetStream store is on the power-loss filesystem
//! ([`crate::system::powerfs`]: writes kept in memory until fsync), with
//! the sync setting the run is on (its `[server] sync`, swept like every
//! scenario's) and the stream's persist mode from `[scenario.stream]`.
//! It publishes at a steady rate with a unique Nats-Msg-Id per message,
//! then, publishers still sending, kills the server with SIGKILL (`cut =
//! "kill"`), or kills it and cuts the power (`"power"`: the unsynced
//! writes dropped). Publishing stops at the kill: the PubAcks received
//! before it are the ledger's "acked". The server is then started on what
//! survived, the recovery timed (from the restart to the stream answering,
//! present or gone), and the stream read back and reconciled by
//! (publisher, message number), since a restarted stream may hand out
//! the sequences of lost messages again.
//!
//! Why a server of its own: the cut destroys its store, and a run's other
//! scenarios must not inherit that; and the mount makes the run's server
//! slower for everything else. On a local cluster the variant's servers
//! are as many nodes, each on its own mount: `kill` and `power` strike
//! them all, `power_leader` the stream leader's alone. It runs only when
//! jsbench may start servers: a run against a server given with
//! `--server` is refused before anything starts (the kind declares its
//! kill); on a host where FUSE cannot be mounted every variant's survival
//! check reads "not applicable" with the reason, and the variant fails
//! for having checked nothing, never a pass.
//!
//! The invariant "every PubAcked message survived the cut" applies where
//! the setting promises it ([`cut::promise`]): a SIGKILL without async
//! persistence, a power cut under sync always, one node's cut of a
//! replicated stream. Elsewhere it reads "not applicable" with what was
//! promised, and the loss is a finding, `lost_after_puback`, never a
//! failure.

mod cut;
pub mod plan;
pub mod reconcile;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::table::{self, Column, Show};
use super::{Kind, Scope, Variants};
use crate::connect::ConnectSettings;
use crate::drive::{DriveOutcome, DriveSpec, FaultPlan, RunContext};
use crate::profile::{CommonPlan, FaultKind, FaultNode, SyncSetting, format_duration};
use crate::record::metrics::Direction;
use crate::record::names;
use crate::server::ServerOptions;
use crate::server::fault::{Faults, RESTART_TIMEOUT};
use crate::server::power::{MountRefused, PowerLossServers, ReplicaState};
use crate::streams::provision::{Need, Provisioner};
use crate::streams::readback::{self, ReadBack};
use crate::system::cpu::ServerCpu;
use crate::system::powerfs::{CutReport, PowerFs};
use crate::variant::{Invariant, VariantResult};

pub use plan::{Cut, Plan};
use reconcile::{StreamState, Survey};

/// The figures this scenario reports that its table reads, by name.
pub const CUT: &str = "cut";
/// "held", "FAILED" or "not applicable": the survival invariant's state.
pub const PROMISE: &str = "promise";
pub const ACKED: &str = "acked";
/// PubAcked messages missing after the restart: the server's loss.
pub const LOST_AFTER_PUBACK: &str = "lost_after_puback";
pub const UNACKED_STORED: &str = "unacked_stored";
/// From the restart command to the stream answering (present or gone), ms.
pub const RECOVERY: &str = "recovery_time";
/// From the restart command to the server accepting connections, ms.
pub const SERVER_READY: &str = "server_ready_time";
/// From the restart command to every node holding the stream's last
/// sequence again (a cluster whose cut spared some nodes), ms.
pub const CAUGHT_UP: &str = "caught_up_time";
/// Bytes written and never fsynced, dropped by the power cut.
pub const CUT_BYTES: &str = "cut_unsynced_bytes";

/// From the planned kill to the end of the publishers' schedule: they
/// must still be sending when it comes (the drive looks every 100 ms).
const SEND_PAST_KILL: Duration = Duration::from_secs(2);
/// How long a restarted server may take to answer for the stream.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the read-back waits for the next message.
const READ_IDLE: Duration = Duration::from_secs(5);

/// The registry's row for `power`.
pub struct Power;

impl Kind for Power {
    const NAME: &'static str = "power";
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        Column::param("promise", PROMISE),
        Column::metric("acked", ACKED, Show::Whole),
        Column::metric("lost after PubAck", LOST_AFTER_PUBACK, Show::Whole),
        Column::metric("rate", names::PUBLISH.rate, Show::Rate),
        table::quantile("pubAck p50", names::PUB_ACK_LATENCY, "p50"),
        table::quantile("p99", names::PUB_ACK_LATENCY, "p99"),
        Column::metric("recovery", RECOVERY, Show::Ms),
        table::VERDICT,
    ];
    type Plan = Plan;

    /// Its streams live on servers of its own; the run's holds nothing.
    fn need(_plan: &Plan, _common: &CommonPlan) -> Need {
        Need::default()
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        (common.duration + common.warmup) * plan.cuts.len() as u32
    }

    /// It kills servers: its own, which only jsbench starts. Declared, the
    /// run refuses up front a server given with --server, where every
    /// variant could only say "not applicable".
    fn faults(_plan: &Plan) -> Option<FaultKind> {
        Some(FaultKind::Kill)
    }

    type Group = ();
    type Shared = ();
    type Variant = Cut;

    fn variants(plan: &Plan, _: &()) -> Variants<Cut> {
        Variants::List(plan.cuts.clone())
    }

    fn label(_plan: &Plan, cut: &Cut) -> String {
        cut.word().into()
    }

    /// A variant that cannot run here says why under its survival check,
    /// "not applicable", and fails for having checked nothing.
    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &mut (),
        &cut: &Cut,
    ) -> Result<()> {
        let ctx = s.ctx;
        let sync = (ctx.stream.sync.or(ctx.server.sync)).unwrap_or(SyncSetting::Default);
        let nodes = ctx.faults.as_ref().map(|f| f.node_names().len());
        let why_not = why_not(nodes, PowerFs::available);
        let nodes = nodes.unwrap_or(1);
        describe(ctx, &s.scenario.common, plan, cut, sync, r);
        r.param("nodes", nodes);
        let promise = cut::promise(cut, sync, ctx.stream.persist, nodes);
        r.param(
            "promised",
            promise.clone().map_or_else(|why| why, String::from),
        );
        match why_not.or_else(|| variant_not_applicable(cut, nodes, ctx.stream.persist)) {
            Some(why) => not_applicable(r, &why),
            None => one_variant(s, plan, (cut, sync, nodes, promise), r).await,
        }
    }
}

/// `nodes`: the servers jsbench started for the run, `None` for a server
/// given with --server; `available`: whether FUSE can be mounted here.
fn why_not(nodes: Option<usize>, available: impl FnOnce() -> Result<()>) -> Option<String> {
    match nodes {
        None => Some(
            "the power scenario kills and cuts a server of its own, which jsbench starts; \
             it does not run against a server given with --server"
                .into(),
        ),
        Some(_) => available()
            .err()
            .map(|e| format!("the power-loss filesystem cannot be mounted here: {e:#}")),
    }
}

/// Why this variant cannot run on `nodes` servers, if so.
fn variant_not_applicable(
    cut: Cut,
    nodes: usize,
    persist: Option<crate::profile::PersistMode>,
) -> Option<String> {
    if cut == Cut::PowerLeader && nodes == 1 {
        return Some(
            "power_leader cuts one node of a cluster (run with --cluster 3); \
             on one server that is cut = \"power\""
                .into(),
        );
    }
    if nodes > 1 && persist == Some(crate::profile::PersistMode::Async) {
        return Some(
            "persist_mode async (ADR-56) is for R1 streams only: the server refuses \
             it on a replicated stream (10052)"
                .into(),
        );
    }
    None
}

/// The variant records why it could not run, as "not applicable".
fn not_applicable(r: &mut VariantResult, why: &str) -> Result<()> {
    r.param(PROMISE, "not applicable");
    r.param("not_applicable", why);
    r.invariants.push(Invariant::not_applicable(
        reconcile::SURVIVED,
        format!("not applicable: {why}"),
    ));
    Ok(())
}

fn describe(
    ctx: &RunContext,
    common: &CommonPlan,
    plan: &Plan,
    cut: Cut,
    sync: SyncSetting,
    r: &mut VariantResult,
) {
    r.param(CUT, cut.word());
    r.param("rate", plan.load.rate);
    r.param("duration", format_duration(common.duration));
    r.param("warmup", format_duration(common.warmup));
    r.param("sync_asked", sync.label());
    r.param(
        "persist_asked",
        ctx.stream
            .persist
            .map_or("default (unset)", crate::profile::persist_name),
    );
    r.param(
        "pub_ack_timeout",
        format_duration(plan.load.publish.pub_ack_timeout),
    );
    r.param("sync_before_load", plan.sync_before_load);
}

/// One variant on servers of its own (one, or a cluster of as many nodes
/// as the run's): started on fresh mounts, loaded, cut, restarted and
/// reconciled.
async fn one_variant(
    s: &Scope<'_>,
    plan: &Plan,
    (cut, sync, nodes, promise): (Cut, SyncSetting, usize, Result<&'static str, String>),
    r: &mut VariantResult,
) -> Result<()> {
    let options = ServerOptions {
        sync: Some(sync),
        ..Default::default()
    };
    // Started on this worker thread, which outlives the servers: a server
    // dies with the thread that spawned it.
    let start = || PowerLossServers::start(nodes, &options);
    let powered = match tokio::task::block_in_place(start) {
        Ok(p) => Arc::new(p),
        Err(e) if e.downcast_ref::<MountRefused>().is_some() => {
            let why = format!("the power-loss filesystem cannot be mounted here: {e:#}");
            return not_applicable(r, &why);
        }
        Err(e) => return Err(e),
    };
    let result = cut_and_recover(s, plan, (cut, promise), &powered, r).await;
    // Stopping the servers and unmounting block for a moment.
    tokio::task::block_in_place(|| drop(powered));
    result
}

/// The variant's own run context: its servers, its connections, its
/// stop (cancelled at the kill), the cut as the drive's fault; no workers.
async fn variant_context(
    ctx: &RunContext,
    servers: &PowerLossServers,
    faults: Arc<cut::CutAtKill>,
) -> Result<RunContext> {
    let connect = ConnectSettings::new(&servers.urls(), ctx.connect.timeout)?;
    let control = connect.connect("control").await?;
    let js = connect.jetstream(control);
    let mut server = ctx.server;
    server.replicas = servers.nodes().len();
    Ok(RunContext {
        provisioner: Provisioner::new(js, false),
        connect,
        names: ctx.names.clone(),
        server,
        stream: ctx.stream.clone(),
        progress: ctx.progress.clone(),
        stop: faults.stop.clone(),
        server_cpu: ServerCpu::Processes(Faults::pids(&*faults)),
        monitors: servers.monitors(),
        faults: Some(faults),
        leaf: None,
        workers: None,
        lead_in: ctx.lead_in,
    })
}

/// Loads the variant's servers, cuts them at the kill, restarts them and
/// reconciles, in a scope on their own context: its stream is deleted
/// there before they stop.
async fn cut_and_recover(
    s: &Scope<'_>,
    plan: &Plan,
    (cut, promise): (Cut, Result<&'static str, String>),
    servers: &Arc<PowerLossServers>,
    r: &mut VariantResult,
) -> Result<()> {
    let stream = s.names().stream;
    let faults = Arc::new(cut::CutAtKill {
        servers: servers.clone(),
        cut,
        stream: stream.clone(),
        stop: s.ctx.stop.child_token(),
        struck: Mutex::new(None),
    });
    let vctx = variant_context(s.ctx, servers, faults.clone()).await?;
    let stated =
        crate::server::telemetry::read_persistence(&vctx.monitors, vctx.provisioner.jetstream())
            .await?;
    r.param("variant_server.sync", stated.sync_label());
    r.param("variant_server.source", &stated.source);
    s.on(&vctx, r, async |vs, r| {
        // Provision.
        vs.stream(vs.stream_config()).await?;
        if plan.sync_before_load {
            // As the 2-minute sync would have done for an older stream: its
            // files reach the disk before the load, so a cut can take its
            // messages but not the stream.
            let synced = tokio::task::block_in_place(|| servers.sync_all())?;
            r.param("synced_before_load_bytes", synced);
        }

        // Drive: the kill comes at the end of the duration, the
        // publishers' schedule running on past it.
        let common = &vs.scenario.common;
        let mut spec = DriveSpec::publish_only(
            vs.drive_label(),
            &stream,
            vec![format!("{}.0", vs.names().base)],
            &plan.load.publish,
            common,
            plan.load.rate,
        );
        spec.duration = common.duration + SEND_PAST_KILL;
        spec.msg_id_prefix = vs.msg_id_prefix();
        spec.fault = Some(FaultPlan {
            after: common.warmup + common.duration,
            node: FaultNode::Server,
            down_for: Duration::ZERO,
            kind: FaultKind::Kill,
        });
        let o = vs.drive(&spec).await?;
        let struck = faults.struck();
        if o.fault.is_none() || struck.is_none() {
            // No kill (the publishers finished first, or the run was
            // stopped): nothing to recover from, and the check says so.
            let interrupted: Vec<bool> = o.sends.iter().map(|s| s.interrupted).collect();
            r.invariants.push(killed_under_load(None, &interrupted));
            return Ok(());
        }
        let struck = struck.unwrap_or_default();
        if cut != Cut::Kill && struck.dropped.is_none() {
            bail!("the server was killed but its power never cut");
        }
        let names: Vec<String> = (struck.nodes.iter())
            .map(|&n| servers.node_name(n).unwrap_or_else(|| "server".into()))
            .collect();
        r.param("struck_nodes", names);

        // Recover, read back, reconcile.
        let recovery = recover(&vs.ctx.connect, servers, &struck.nodes, &stream).await?;
        measure(&o, &recovery, struck.dropped.as_ref(), r);
        verify(&o, &recovery, &promise, r);
        Ok(())
    })
    .await
}

/// What the restart found and how long it took.
struct Recovery {
    ready: Duration,
    readable: Duration,
    /// A cluster after a cut that spared some nodes: until every node
    /// holds the stream up to its last sequence again.
    caught_up: Option<Duration>,
    /// The stream's state in the first answer after the restart: on a
    /// cluster it may come from a replica not yet current.
    first_answer: Option<StreamState>,
    survey: Survey,
}

/// Starts the server on what survived and waits until it answers for the
/// stream: found, or definitely not found (JetStream restores its streams
/// before the server takes clients). Then reads the stream back.
async fn recover(
    connect: &ConnectSettings,
    servers: &PowerLossServers,
    struck: &[usize],
    stream: &str,
) -> Result<Recovery> {
    let started = Instant::now();
    let every = struck.len() == servers.nodes().len();
    tokio::task::block_in_place(|| {
        if every {
            servers.restart_all(RESTART_TIMEOUT)
        } else {
            struck
                .iter()
                .try_for_each(|&n| servers.restart(n, RESTART_TIMEOUT))
        }
    })
    .context("restarting the servers on what survived")?;
    let ready = started.elapsed();
    let client = connect.connect("recovery").await?;
    let js = connect.jetstream(client);
    let mut state = stream_state(&js, stream, started).await?;
    let first_answer = state;
    let readable = started.elapsed();
    let mut caught_up = None;
    if state.is_some() && !every {
        // The nodes the cut spared hold the whole stream; the struck one
        // catches up from them. The stream's own answer may come from a
        // replica not yet current, so the state is asked again after.
        tokio::task::block_in_place(|| catch_up(servers, stream))
            .context("waiting for the struck node to catch up")?;
        caught_up = Some(started.elapsed());
        state = stream_state(&js, stream, started).await?;
    }
    let read = match state {
        Some(_) => readback::read_stream(&js, stream, READ_IDLE)
            .await
            .context("reading the stream back after the restart")?,
        None => ReadBack {
            complete: true,
            ..Default::default()
        },
    };
    Ok(Recovery {
        ready,
        readable,
        caught_up,
        first_answer,
        survey: Survey {
            stream: state,
            read,
        },
    })
}

/// The stream as the restarted servers answer for it: found, or
/// definitely not found, retried until `RECOVERY_TIMEOUT` from `started`.
async fn stream_state(
    js: &async_nats::jetstream::Context,
    stream: &str,
    started: Instant,
) -> Result<Option<StreamState>> {
    loop {
        match js.get_stream(stream).await {
            Ok(s) => {
                let state = &s.cached_info().state;
                return Ok(Some(StreamState {
                    messages: state.messages,
                    first_seq: state.first_sequence,
                    last_seq: state.last_sequence,
                }));
            }
            Err(e) if super::scope::stream_not_found(&e) => return Ok(None),
            Err(e) if started.elapsed() > RECOVERY_TIMEOUT => {
                bail!(
                    "the restarted server did not answer for stream {stream} within {RECOVERY_TIMEOUT:?}: {e}"
                )
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Waits until every node holds the stream up to the furthest sequence
/// any node holds (a survivor's, which the struck node must reach).
fn catch_up(servers: &PowerLossServers, stream: &str) -> Result<()> {
    let answers = (0..servers.nodes().len()).map(|n| {
        (servers.replica(n, stream)).with_context(|| format!("asking node {} for {stream}", n + 1))
    });
    servers.wait_replicas_at(stream, furthest(answers)?, RECOVERY_TIMEOUT)
}

/// The furthest last sequence any node holds: what every node must reach.
/// A node that could not be asked fails it with its error rather than be
/// left out: the furthest of the others may fall short of the truth, and
/// the catch-up timed to it would read as done before it was (with none
/// answering, it waited for sequence 0 and timed out saying so).
fn furthest(answers: impl IntoIterator<Item = Result<Option<ReplicaState>>>) -> Result<u64> {
    let mut furthest = None;
    for answer in answers {
        if let Some(r) = answer? {
            furthest = furthest.max(Some(r.last_seq));
        }
    }
    furthest.context("no node holds the stream, though it answered for it")
}

fn measure(o: &DriveOutcome, rec: &Recovery, dropped: Option<&CutReport>, r: &mut VariantResult) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let confirmed: Vec<_> = o.acks.iter().map(|a| &a.stored_by_message).collect();
    let c = reconcile::reconcile(&rec.survey, &confirmed);
    r.ledger = o.counts;
    r.ledger.lost = c.lost_after_puback;
    // Paced: the achieved rates say whether the setting kept up, from
    // the first send (PubAck) after the warm-up to the last before the kill.
    super::checks::publish_rate(o, r);
    r.metric("acked_rate", "msg/s", o.acked_rate(), Direction::Higher);
    // From each message's intended send to its PubAck, after the warm-up.
    r.latency(names::PUB_ACK_LATENCY, &o.pub_ack_intended);
    r.count(names::PUBLISHED, o.sends_sum(|s| s.sent));
    r.count(ACKED, c.acked);
    r.metric(
        LOST_AFTER_PUBACK,
        "count",
        c.lost_after_puback as f64,
        Direction::Lower,
    );
    r.count(UNACKED_STORED, c.unacked_stored);
    r.count("stored_twice", c.stored_twice);
    r.metric(SERVER_READY, "ms", ms(rec.ready), Direction::Lower);
    r.metric(RECOVERY, "ms", ms(rec.readable), Direction::Lower);
    if let (Some(first), Some(_)) = (rec.first_answer, rec.caught_up) {
        r.param("stream_first_answer.messages", first.messages);
        r.param("stream_first_answer.last_seq", first.last_seq);
    }
    if let Some(caught_up) = rec.caught_up {
        r.metric(CAUGHT_UP, "ms", ms(caught_up), Direction::Lower);
    }
    match &rec.survey.stream {
        Some(s) => {
            r.param("stream_after", "present");
            r.param("stream_after.messages", s.messages);
            r.param("stream_after.first_seq", s.first_seq);
            r.param("stream_after.last_seq", s.last_seq);
        }
        None => r.param("stream_after", "gone"),
    }
    r.param("last_acked_seq", o.ledger.max_seq());
    if let Some(f) = &o.fault {
        let after = f.killed_ns.saturating_sub(o.t0_ns);
        r.param("killed_after_t0_ms", after / 1_000_000);
    }
    if let Some(d) = dropped {
        r.count(CUT_BYTES, d.unsynced_bytes);
        let files: Vec<String> = d
            .unsynced_files
            .iter()
            .map(|(f, bytes)| format!("{} ({bytes} B)", f.display()))
            .collect();
        r.param("cut_unsynced_files", files);
    }
}

fn verify(
    o: &DriveOutcome,
    rec: &Recovery,
    promise: &Result<&'static str, String>,
    r: &mut VariantResult,
) {
    let confirmed: Vec<_> = o.acks.iter().map(|a| &a.stored_by_message).collect();
    let c = reconcile::reconcile(&rec.survey, &confirmed);
    let checks = reconcile::verify(&rec.survey, &c, promise);
    r.param(PROMISE, checks[0].state());
    r.invariants.extend(checks);
    let killed_after = o
        .fault
        .as_ref()
        .map(|f| Duration::from_nanos(f.killed_ns.saturating_sub(o.t0_ns)));
    let interrupted: Vec<bool> = o.sends.iter().map(|s| s.interrupted).collect();
    r.invariants
        .push(killed_under_load(killed_after, &interrupted));
}

/// The kill came while every publisher still had messages to send: the
/// ledger's "acked" is what was confirmed before a kill under load.
/// `killed_after`: from t0 to the kill, `None` when it never came;
/// `interrupted`: per publisher, whether the kill stopped it mid-schedule.
fn killed_under_load(killed_after: Option<Duration>, interrupted: &[bool]) -> Invariant {
    let stopped = interrupted.iter().filter(|&&i| i).count();
    Invariant::check(
        "the server was killed under load",
        killed_after.is_some() && stopped == interrupted.len() && stopped > 0,
        match killed_after {
            Some(after) => format!(
                "killed {} ms after t0; {stopped} of {} publishers stopped mid-schedule",
                after.as_millis(),
                interrupted.len()
            ),
            None => "the kill never happened: the publishers finished first".into(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each target jsbench cannot cut says why; only the embedded server
    /// on a host that mounts FUSE runs the variants.
    #[test]
    fn a_user_server_a_cluster_or_a_host_without_fuse_is_not_applicable_with_its_reason() {
        let fine = || Ok(());
        assert_eq!(why_not(Some(1), fine), None);
        assert!(why_not(None, fine).unwrap().contains("--server"));
        assert_eq!(why_not(Some(3), fine), None);
        let no_fuse = || Err(anyhow::anyhow!("no /dev/fuse"));
        let why = why_not(Some(1), no_fuse).unwrap();
        assert!(
            why.contains("cannot be mounted") && why.contains("no /dev/fuse"),
            "{why}"
        );
    }

    #[test]
    fn a_leader_cut_on_one_server_and_async_persistence_on_a_cluster_are_not_applicable() {
        use crate::profile::PersistMode::Async;
        assert_eq!(variant_not_applicable(Cut::PowerLeader, 3, None), None);
        assert_eq!(variant_not_applicable(Cut::Power, 3, None), None);
        assert_eq!(variant_not_applicable(Cut::Power, 1, Some(Async)), None);
        let why = variant_not_applicable(Cut::PowerLeader, 1, None).unwrap();
        assert!(why.contains("cluster"), "{why}");
        let why = variant_not_applicable(Cut::Kill, 3, Some(Async)).unwrap();
        assert!(why.contains("10052"), "{why}");
    }

    /// The furthest sequence the struck node must reach: a node that
    /// could not be asked fails it with its error, never lowers it (to 0
    /// when none answered).
    #[test]
    fn a_node_that_cannot_be_asked_fails_the_catch_up_target() {
        let at = |last_seq| {
            Ok(Some(ReplicaState {
                messages: last_seq,
                first_seq: 1,
                last_seq,
            }))
        };
        assert_eq!(furthest([at(90), at(120), Ok(None)]).unwrap(), 120);
        let refused = || Err(anyhow::anyhow!("node 2's /jsz: connection refused"));
        let e = furthest([at(90), refused(), at(120)]).unwrap_err();
        assert!(format!("{e:#}").contains("connection refused"), "{e:#}");
        let e = furthest([refused(), refused()]).unwrap_err();
        assert!(format!("{e:#}").contains("connection refused"), "{e:#}");
        let e = furthest([Ok(None), Ok(None)]).unwrap_err();
        assert!(format!("{e:#}").contains("no node"), "{e:#}");
    }

    #[test]
    fn a_kill_after_the_load_or_none_at_all_fails_killed_under_load() {
        let at = Some(Duration::from_secs(3));
        assert!(killed_under_load(at, &[true, true]).passed);
        assert!(!killed_under_load(at, &[true, false]).passed);
        assert!(!killed_under_load(at, &[]).passed);
        let check = killed_under_load(None, &[true]);
        assert!(!check.passed && check.detail.contains("never happened"));
    }
}
