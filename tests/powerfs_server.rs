//! nats-server 2.15.1 with its store on the power-loss filesystem: it
//! runs there, and after SIGKILL plus a power cut, a server restarted on
//! what the cut left keeps every PubAcked message when it syncs always.
//! With the default sync (every 2 minutes) the test prints how many
//! survived (docs/durability.md records the figure). Needs root,
//! /dev/fuse and the pinned server; fails, never skips, without them.

mod common;

use std::path::{Path, PathBuf};

use async_nats::jetstream::{self, stream};
use jsbench::server::{EmbeddedServer, ServerOptions};
use jsbench::system::powerfs::{CutReport, Mounted, PowerFs};

/// A server on a fresh power-loss mount, with `config` (if any) as its
/// configuration file. Returns the mount before the server so the test
/// can kill the server first, and the folder that holds both.
fn server_on_mount(config: Option<&str>) -> (tempfile::TempDir, Mounted, EmbeddedServer) {
    let tmp = tempfile::tempdir().unwrap();
    let backing = tmp.path().join("backing");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&backing).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let mounted = PowerFs::mount(&backing, &mnt)
        .unwrap_or_else(|e| panic!("the power-loss layer cannot mount here: {e:#}"));
    let mut extra_args = Vec::new();
    if let Some(config) = config {
        let path = tmp.path().join("server.conf");
        std::fs::write(&path, config).unwrap();
        extra_args = vec!["-c".into(), path.display().to_string()];
    }
    let server = common::server_with(&ServerOptions {
        store_dir: Some(mnt),
        extra_args,
        ..Default::default()
    });
    (tmp, mounted, server)
}

/// Creates the file-storage stream the tests publish to.
async fn create_stream(server: &EmbeddedServer) -> jetstream::Context {
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client);
    js.create_stream(stream::Config {
        name: "POWER".into(),
        subjects: vec!["power.>".into()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .unwrap();
    js
}

/// Publishes `n` messages one at a time, each waiting for its PubAck;
/// returns how many were acked (and prints the rate, the figure
/// docs/durability.md quotes).
async fn publish(js: &jetstream::Context, n: u64) -> u64 {
    let started = std::time::Instant::now();
    let mut acked = 0;
    for i in 0..n {
        let ack = js
            .publish(format!("power.{i}"), vec![b'x'; 128].into())
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(ack.sequence, i + 1);
        acked += 1;
    }
    let rate = acked as f64 / started.elapsed().as_secs_f64();
    eprintln!("{acked} PubAcks one at a time on the power-loss mount: {rate:.0} msg/s");
    acked
}

async fn publish_acked(server: &EmbeddedServer, n: u64) -> u64 {
    publish(&create_stream(server).await, n).await
}

/// SIGKILL, then the power cut; the report of what the cut dropped.
fn crash(
    server: &EmbeddedServer,
    mounted: Mounted,
    tmp: &tempfile::TempDir,
) -> (PathBuf, CutReport) {
    server.kill().unwrap();
    let backing = tmp.path().join("backing");
    let report = mounted.cut_power().expect("the power cut");
    (backing, report)
}

/// Messages in the stream of a server started on `store`: None when the
/// stream itself did not survive.
async fn survivors(store: &Path) -> Option<u64> {
    let server = common::server_with(&ServerOptions {
        store_dir: Some(store.to_path_buf()),
        ..Default::default()
    });
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client);
    let mut stream = js.get_stream("POWER").await.ok()?;
    Some(stream.info().await.unwrap().state.messages)
}

#[tokio::test]
async fn with_sync_always_every_pub_acked_message_survives_a_power_cut() {
    let (tmp, mounted, server) = server_on_mount(Some("jetstream { sync_interval: always }\n"));
    let acked = publish_acked(&server, 1000).await;
    let (backing, report) = crash(&server, mounted, &tmp);
    let left = survivors(&backing).await;
    eprintln!("sync always: {acked} acked, {left:?} survived, cut dropped {report:?}");
    assert_eq!(
        left,
        Some(acked),
        "sync_interval: always promises every PubAck"
    );
}

#[tokio::test]
async fn with_the_default_sync_a_power_cut_drops_what_a_kill_would_keep() {
    let (tmp, mounted, server) = server_on_mount(None);
    let acked = publish_acked(&server, 1000).await;
    let (backing, report) = crash(&server, mounted, &tmp);
    let left = survivors(&backing).await;
    eprintln!(
        "default sync: {acked} acked, {left:?} survived; the cut dropped {} unsynced bytes in {:?}",
        report.unsynced_bytes, report.unsynced_files
    );
    assert!(left.unwrap_or(0) <= acked);
    // 1,000 messages of 128 bytes reached the server's message block with
    // no fsync inside its 2-minute interval: the cut must drop them, or
    // the layer is keeping what a power loss would not.
    assert!(
        report.unsynced_bytes >= 128 * acked,
        "the cut dropped only {} bytes",
        report.unsynced_bytes
    );
}

#[tokio::test]
async fn a_kill_alone_keeps_every_message_the_power_cut_drops() {
    let (tmp, mounted, server) = server_on_mount(None);
    let acked = publish_acked(&server, 1000).await;
    server.kill().unwrap();
    // What SIGKILL leaves: the page cache outlives the process and is
    // written out; an orderly unmount syncs it all.
    let backing = tmp.path().join("backing");
    mounted.sync_all().unwrap();
    mounted.cut_power().unwrap();
    assert_eq!(survivors(&backing).await, Some(acked));
}

#[tokio::test]
async fn with_the_default_sync_an_older_stream_survives_the_cut_and_the_test_counts_its_messages() {
    let (tmp, mounted, server) = server_on_mount(None);
    let js = create_stream(&server).await;
    // The stream older than the sync interval: its files reached the disk.
    mounted.sync_all().unwrap();
    let acked = publish(&js, 1000).await;
    let (backing, report) = crash(&server, mounted, &tmp);
    let left = survivors(&backing).await;
    eprintln!(
        "default sync, stream synced before: {acked} acked, {left:?} survived; the cut dropped {} bytes in {:?}",
        report.unsynced_bytes, report.unsynced_files
    );
    let left = left.expect("a stream whose files were synced survives the cut");
    assert!(left <= acked);
}
