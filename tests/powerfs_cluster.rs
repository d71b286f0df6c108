//! R3 file streams on the local 3-node cluster, each node's store on its
//! own power-loss mount (jsbench::server::power): what a stream keeps
//! when one node loses its power (a follower, then the stream leader) and
//! when all three lose it at once, with the default sync and with
//! `sync_interval: always`. Each test prints its counts and times
//! (docs/durability.md records them). Needs root, /dev/fuse and the
//! pinned server; fails, never skips, without them.
//!
//! Times run from the call that restarts the node(s) to the instant the
//! condition was seen: the cluster ready (every node agrees on a meta
//! leader that sees every peer current), every replica at the stream's
//! last PubAcked sequence (each node's /jsz polled every 20 ms), and a
//! new stream leader (from the cut, the survivors' /jsz).

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};
use jsbench::profile::SyncSetting;
use jsbench::server::ServerOptions;
use jsbench::server::fault::Faults;
use jsbench::server::power::{PowerLossServers, ReplicaState};
use jsbench::system::powerfs::CutReport;

const STREAM: &str = "POWER";
const MESSAGE_SIZE: usize = 128;
/// PubAcked messages before a cut.
const ACKED: u64 = 500;
/// Unsynced bytes of a Raft log synced per write that a cut may still
/// catch: the entries a node outside the quorum is writing (16 of ~250
/// bytes), far below the ~64 KB of a log of `ACKED` entries never synced.
const RAFT_IN_FLIGHT_TAIL: u64 = 4096;
/// Generous: a stream leader's election alone takes several seconds.
const WAIT: Duration = Duration::from_secs(30);

/// The client's runtime, on a thread of its own: the test thread blocks in
/// restarts (and must stay alive: the servers it spawns die with it).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

fn start(nodes: usize, sync: SyncSetting) -> PowerLossServers {
    PowerLossServers::start(
        nodes,
        &ServerOptions {
            sync: Some(sync),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("cannot start servers on power-loss mounts: {e:#}"))
}

async fn connect(servers: &PowerLossServers) -> jetstream::Context {
    let urls: Vec<async_nats::ServerAddr> = servers
        .nodes()
        .iter()
        .map(|n| n.url().parse().unwrap())
        .collect();
    jetstream::new(async_nats::connect(urls).await.unwrap())
}

/// Creates file stream `name` on subjects `<name>.>` with `replicas`, and
/// returns its leader's name.
async fn create(js: &jetstream::Context, name: &str, replicas: usize) -> String {
    let mut stream = js
        .create_stream(stream::Config {
            name: name.into(),
            subjects: vec![format!("{name}.>")],
            storage: stream::StorageType::File,
            num_replicas: replicas,
            ..Default::default()
        })
        .await
        .unwrap();
    let info = stream.info().await.unwrap();
    info.cluster.clone().and_then(|c| c.leader).unwrap()
}

/// Publishes `n` messages to `stream` after sequence `last`, one at a
/// time, each waiting for its PubAck; returns the new last sequence.
async fn publish(js: &jetstream::Context, stream: &str, last: u64, n: u64) -> u64 {
    let started = Instant::now();
    for i in 1..=n {
        let ack = js
            .publish(format!("{stream}.{i}"), vec![b'x'; MESSAGE_SIZE].into())
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(ack.sequence, last + i);
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    eprintln!("{stream}: {n} PubAcks one at a time, {rate:.0} msg/s");
    last + n
}

/// Waits until a node other than `cut` (whose power went) reports a
/// stream leader other than it, and returns that leader's name.
fn new_leader(servers: &PowerLossServers, cut: usize) -> String {
    let old = servers.node_name(cut).unwrap();
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        for node in (0..3).filter(|&n| n != cut) {
            if let Ok(Some(leader)) = servers.leader_seen_by(node, STREAM)
                && leader != old
            {
                return leader;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no new leader for {STREAM} within {WAIT:?} after {old} lost its power");
}

fn replicas(servers: &PowerLossServers, stream: &str) -> Vec<Option<ReplicaState>> {
    (0..servers.nodes().len())
        .map(|n| servers.replica(n, stream).unwrap())
        .collect()
}

/// Every PubAcked sequence 1..=last is on every node, and nothing else.
fn assert_every_replica_holds(servers: &PowerLossServers, stream: &str, last: u64, after: &str) {
    let whole = ReplicaState {
        messages: last,
        first_seq: 1,
        last_seq: last,
    };
    for (n, state) in replicas(servers, stream).into_iter().enumerate() {
        assert_eq!(
            state,
            Some(whole),
            "{stream} on node {} after {after}: {last} PubAcked messages, it holds {state:?}",
            n + 1
        );
    }
}

/// The cut dropped `stream`'s unsynced message block on this node, so a
/// replica whole after the restart got its messages from its peers or
/// from its Raft log, not from its own stream files.
fn assert_dropped_messages_of(report: &CutReport, stream: &str, acked: u64) {
    let block = format!("jetstream/$G/streams/{stream}/msgs/1.blk");
    assert!(
        report.unsynced_bytes >= MESSAGE_SIZE as u64 * acked
            && report
                .unsynced_files
                .iter()
                .any(|(f, _)| f.ends_with(&block)),
        "the cut should drop {stream}'s unsynced message block: {report:?}"
    );
}

/// Restarts `node` on what its cut kept and waits for the cluster and
/// every replica of the stream at `last`, printing both times.
fn restart_and_catch_up(servers: &PowerLossServers, node: usize, last: u64, report: &CutReport) {
    let started = Instant::now();
    servers
        .restart(node, WAIT)
        .unwrap_or_else(|e| panic!("node {} after its power cut: {e:#}", node + 1));
    let ready = started.elapsed();
    servers.wait_replicas_at(STREAM, last, WAIT).unwrap();
    eprintln!(
        "node {} cut ({} unsynced bytes dropped): cluster ready {ready:?}, every replica at {last} {:?} after the restart",
        node + 1,
        report.unsynced_bytes,
        started.elapsed()
    );
}

/// The default sync (an fsync every 2 minutes) on every node: a node that
/// loses its power loses its copy, log and stream files, and still comes
/// back whole, since the two others (a quorum) held every PubAcked
/// message. Then the stream leader: the two left elect a leader and take
/// new messages while it is down, and it catches up on those too.
#[test]
fn one_node_cut_keeps_every_pub_acked_message_follower_then_leader() {
    let rt = runtime();
    let servers = start(3, SyncSetting::Default);
    let (leader, last) = rt.block_on(async {
        let js = connect(&servers).await;
        let leader = create(&js, STREAM, 3).await;
        (leader, publish(&js, STREAM, 0, ACKED).await)
    });
    let leader = servers.node_named(&leader).expect("the leader is a node");
    let follower = (leader + 1) % 3;

    eprintln!("the follower, node {}:", follower + 1);
    let report = servers.cut_power(follower).unwrap();
    assert_dropped_messages_of(&report, STREAM, last);
    restart_and_catch_up(&servers, follower, last, &report);
    assert_every_replica_holds(&servers, STREAM, last, "the follower's power cut");

    eprintln!("the stream leader, node {}:", leader + 1);
    let report = servers.cut_power(leader).unwrap();
    assert_dropped_messages_of(&report, STREAM, last);
    let cut = Instant::now();
    let new = new_leader(&servers, leader);
    eprintln!("new stream leader {new} {:?} after the cut", cut.elapsed());
    let last = rt.block_on(async { publish(&connect(&servers).await, STREAM, last, 100).await });
    restart_and_catch_up(&servers, leader, last, &report);
    assert_every_replica_holds(&servers, STREAM, last, "the leader's power cut");
}

/// Cuts every node's power at once after `ACKED` PubAcks to each of
/// `streams`, restarts all, and returns what each cut dropped once the
/// cluster is ready again (each node's warnings, the evidence of what the
/// server made of its store, printed). `before_publishing` runs after the
/// streams were created.
fn all_nodes_cut(
    sync: SyncSetting,
    streams: &[&str],
    before_publishing: impl Fn(&PowerLossServers, &str),
) -> (Vec<CutReport>, PowerLossServers) {
    let rt = runtime();
    let servers = start(3, sync);
    rt.block_on(async {
        let js = connect(&servers).await;
        for stream in streams {
            create(&js, stream, 3).await;
            before_publishing(&servers, stream);
        }
        for stream in streams {
            publish(&js, stream, 0, ACKED).await;
        }
    });
    let all: Vec<usize> = (0..servers.nodes().len()).collect();
    let reports = servers.cut_power_of(&all).unwrap();
    let started = Instant::now();
    servers
        .restart_all(WAIT)
        .unwrap_or_else(|e| panic!("the cluster after an all-node power cut: {e:#}"));
    eprintln!(
        "sync {}: all three cut, cluster ready {:?} after the restart",
        sync.label(),
        started.elapsed()
    );
    for (n, node) in servers.nodes().iter().enumerate() {
        for line in node.log_problems() {
            if !line.contains("connect to route") {
                eprintln!("  node {}: {line}", n + 1);
            }
        }
    }
    (reports, servers)
}

/// `sync_interval: always` on every node: nothing PubAcked may be lost,
/// all three cut at once. The stream's own message block is not synced
/// per write on R3 (the server syncs it at each snapshot instead: the
/// Raft log behind it is synced per write), so every replica is rebuilt
/// from its log; the test pins that too. A PubAck needs a quorum (two of
/// three), so the cut may catch the third node between writing its last
/// entries and syncing them: a log synced per write leaves at most that
/// in-flight tail unsynced (a few entries of about 250 bytes each), one
/// that is not leaves all 500 (over 64 KB).
#[test]
fn all_nodes_cut_with_sync_always_keeps_every_pub_acked_message() {
    let (reports, servers) = all_nodes_cut(SyncSetting::Always, &[STREAM], |_, _| {});
    let started = Instant::now();
    servers
        .wait_replicas_at(STREAM, ACKED, WAIT)
        .unwrap_or_else(|e| panic!("sync always promises every PubAck: {e:#}"));
    eprintln!("every replica at {ACKED} {:?} later", started.elapsed());
    assert_every_replica_holds(&servers, STREAM, ACKED, "an all-node cut with sync always");
    for report in &reports {
        eprintln!("sync always, the cut dropped {report:?}");
        assert_dropped_messages_of(report, STREAM, ACKED / 2);
    }
    for (node, report) in reports.iter().enumerate() {
        let raft_tail: u64 = report
            .unsynced_files
            .iter()
            .filter(|(f, _)| {
                let f = f.to_string_lossy();
                f.contains("/_js_/S-R3F-") && f.ends_with(".blk")
            })
            .map(|(_, bytes)| bytes)
            .sum();
        assert!(
            raft_tail <= RAFT_IN_FLIGHT_TAIL,
            "node {}: the stream's Raft log is synced per write with sync always, \
             yet {raft_tail} bytes of it were unsynced (over {RAFT_IN_FLIGHT_TAIL}, \
             more than the entries a node outside the quorum may still be syncing): {report:?}",
            node + 1
        );
    }
}

/// The default sync on every node, two streams cut together: YOUNG,
/// created and written less than 2 minutes before all three lose their
/// power, is gone from the whole cluster (every copy and the meta group's
/// record of it); OLDER, whose files were synced before publishing (as
/// the 2-minute sync does for a stream older than that), comes back with
/// a leader and none of its messages. Pinned: a server that kept either
/// would change docs/durability.md.
#[test]
fn all_nodes_cut_with_the_default_sync_loses_a_young_stream_and_an_older_ones_messages() {
    let (reports, servers) = all_nodes_cut(SyncSetting::Default, &["OLDER", "YOUNG"], |s, name| {
        if name == "OLDER" {
            s.sync_all().unwrap();
        }
    });
    for report in &reports {
        assert_dropped_messages_of(report, "OLDER", ACKED);
        assert_dropped_messages_of(report, "YOUNG", ACKED);
    }
    let older = replicas(&servers, "OLDER");
    let young = replicas(&servers, "YOUNG");
    let rt = runtime();
    let lookup = rt.block_on(async {
        let js = connect(&servers).await;
        js.get_stream("YOUNG")
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    eprintln!(
        "default sync, {ACKED} PubAcked in each: OLDER on each node {older:?}; \
         YOUNG on each node {young:?}, looked up: {lookup:?}"
    );
    assert_eq!(young, vec![None, None, None]);
    assert!(lookup.is_err(), "YOUNG came back: {lookup:?}");
    assert_eq!(older, vec![Some(ReplicaState::default()); 3]);
}

/// The same owner with one server: its power cut and restart, the seam
/// a single-server scenario uses.
#[test]
fn one_server_on_a_mount_keeps_every_pub_acked_message_with_sync_always() {
    let rt = runtime();
    let servers = start(1, SyncSetting::Always);
    let last = rt.block_on(async {
        let js = connect(&servers).await;
        create(&js, STREAM, 1).await;
        publish(&js, STREAM, 0, 200).await
    });
    let report = servers.cut_power(0).unwrap();
    let before = servers.pids();
    // Through the seam a scenario that kills and restarts nodes uses.
    let faults: &dyn Faults = &servers;
    assert_eq!(faults.node_names(), ["server"]);
    faults.restart(0).unwrap();
    assert_ne!(faults.pids(), before, "a restart starts a new process");
    eprintln!("one server, sync always: the cut dropped {report:?}");
    assert_every_replica_holds(&servers, STREAM, last, "a power cut with sync always");
}
