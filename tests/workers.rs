//! Workers: `jsbench run --workers N` with real `jsbench worker` processes
//! on this machine, against the embedded server and the local 3-node
//! cluster. One merged results folder whose counts are the sum of every
//! process's, invariants that hold across processes, clock offsets that
//! the shared clock of one machine bounds; a worker killed mid-run; a
//! worker of another version refused.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::jsbench;
use futures::StreamExt;
use jsbench::results::summary::{Summary, VariantReport};
use jsbench::worker::auth::{self, Key, SECRET_ENV};
use jsbench::worker::merge::DriveRecord;
use jsbench::worker::protocol::PartCounts;
use jsbench::worker::protocol::{self, Announce, Command, Identity, Reply};

/// The secret every coordinator and worker of these tests shares.
const SECRET: &str = "c2VjcmV0IG9mIHRoZSB3b3JrZXJzIHRlc3Rz";

fn key() -> Key {
    Key::from_secret(SECRET.as_bytes()).unwrap()
}

/// A jsbench process that is killed when the test ends, however it ends,
/// with its stderr collected line by line (read continuously, so a full
/// pipe never stalls it).
struct Proc {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    fn spawn(command: &mut std::process::Command) -> Proc {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("jsbench starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        for stream in [
            Box::new(child.stderr.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stdout.take().unwrap()),
        ] {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(line);
                }
            });
        }
        Proc { child, lines }
    }

    fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// The first line containing `needle`, waiting up to `limit` for it.
    fn wait_for(&mut self, needle: &str, limit: Duration) -> String {
        let until = Instant::now() + limit;
        loop {
            if let Some(line) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(needle))
            {
                return line.clone();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                std::thread::sleep(Duration::from_millis(200));
                panic!(
                    "exited ({status}) before printing {needle:?}:\n{}",
                    self.output()
                );
            }
            assert!(
                Instant::now() < until,
                "no {needle:?} within {limit:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The exit status, waiting up to `limit`.
    fn wait(&mut self, limit: Duration) -> i32 {
        let until = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the reader threads take the last lines.
                std::thread::sleep(Duration::from_millis(200));
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < until,
                "still running after {limit:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A coordinator on its own embedded server (or cluster), printing the
/// worker command line once it waits for workers.
fn coordinator(dir: &Path, profile: &Path, extra: &[&str]) -> Proc {
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    Proc::spawn(
        jsbench()
            .args([
                "run",
                profile.to_str().unwrap(),
                "--progress",
                "never",
                "-o",
            ])
            .arg(dir.join("results"))
            .args(extra)
            .env_remove("NATS_URL")
            .env_remove("NATS_CONTEXT")
            .env(SECRET_ENV, SECRET)
            .env("TMPDIR", &tmp),
    )
}

/// The server URL(s) from the coordinator's "jsbench worker -s URL" hint.
fn worker_url(coordinator: &mut Proc) -> String {
    let line = coordinator.wait_for("jsbench worker -s ", Duration::from_secs(60));
    let url = line
        .split_whitespace()
        .skip_while(|w| *w != "-s")
        .nth(1)
        .expect("a URL after -s")
        .to_string();
    for u in url.split(',') {
        assert!(u.starts_with("nats://127.0.0.1:"), "{url}");
    }
    url
}

fn worker(url: &str, name: &str) -> Proc {
    Proc::spawn(
        jsbench()
            .args(["worker", "-s", url, "--once", "--name", name])
            .env(SECRET_ENV, SECRET)
            .env_remove("NATS_CONTEXT"),
    )
}

/// A latency profile with `n` publishers and `n` consumer clients, so
/// each of the `n` processes gets one of each.
fn profile(
    dir: &Path,
    n: usize,
    rate: u64,
    duration: &str,
    extra: &str,
    consumer: &str,
) -> PathBuf {
    common::profile(
        dir,
        "split",
        &format!(
            "[[scenario]]\nkind = \"latency\"\nduration = \"{duration}\"\nwarmup = \"500ms\"\n\
             rates = [{rate}]\npublishers = {n}\n{extra}\n\
             [scenario.consumer]\nconsumers = {n}\nbatch = 100\n{consumer}\n"
        ),
    )
}

fn drives(v: &VariantReport) -> Vec<DriveRecord> {
    let value = v
        .params
        .get("workers")
        .unwrap_or_else(|| panic!("{} has no workers param: {:?}", v.name, v.params));
    serde_json::from_value(value.clone()).expect("a list of drive records")
}

/// The merged counts are the sum of every process's, and every process
/// ran exactly its share.
fn assert_counts_add_up(v: &VariantReport, processes: usize) {
    let drives = drives(v);
    assert_eq!(drives.len(), 1, "{drives:?}");
    let d = &drives[0];
    assert_eq!(d.coordinator_only, None);
    assert_eq!(d.processes.len(), processes, "{d:?}");
    assert_eq!(d.processes[0].process, "coordinator");
    let mut sum = PartCounts::default();
    for (k, p) in d.processes.iter().enumerate() {
        assert_eq!(p.status, "ok", "{p:?}");
        assert_eq!(p.publishers, vec![k], "{p:?}");
        assert_eq!(p.consumers, vec![k], "{p:?}");
        let counts = p.counts.expect("counts of every process");
        assert!(counts.published > 0, "{p:?}");
        sum += counts;
    }
    let l = &v.ledger;
    assert!(l.published > 0);
    assert_eq!(sum.published, l.published, "published");
    assert_eq!(sum.persisted, l.persisted, "persisted");
    assert_eq!(sum.deliveries, l.deliveries, "deliveries");
    // Every message acked once, by whichever process received it.
    assert_eq!(sum.acks, l.acked, "acks");
    assert_eq!(l.lost, 0);
    assert_eq!(l.delivered, l.persisted);
}

/// One machine shares one clock: the estimate of a worker's offset can
/// only be off by what the round trip leaves open.
fn assert_clocks_bounded(summary: &Summary, workers: usize) -> f64 {
    let list = &summary.run.workers;
    assert_eq!(list.len(), workers, "{list:?}");
    let mut worst = 0f64;
    for w in list {
        assert_eq!(w.status, "ok", "{w:?}");
        assert_eq!(w.clock_samples, 16);
        assert!(w.clock_rtt_us > 0.0, "{w:?}");
        assert!(
            w.clock_offset_us.abs() <= w.clock_rtt_us,
            "offset beyond the round trip: {w:?}"
        );
        assert!(
            (w.clock_uncertainty_us - w.clock_rtt_us / 2.0).abs() <= 0.001 + 1e-9,
            "{w:?}"
        );
        let (residual, bound) = (
            w.residual_offset_us.expect("measured again after the run"),
            w.residual_uncertainty_us.unwrap(),
        );
        assert!(
            residual.abs() <= w.clock_uncertainty_us + bound,
            "the correction left more than both bounds: {w:?}"
        );
        worst = worst.max(w.clock_uncertainty_us);
    }
    worst
}

#[test]
fn three_workers_split_the_load_and_the_merged_counts_are_the_sum() {
    let dir = tempfile::tempdir().unwrap();
    let profile = profile(dir.path(), 4, 1000, "2s", "", "");
    let mut coord = coordinator(dir.path(), &profile, &["--workers", "3"]);
    let url = worker_url(&mut coord);
    let mut workers: Vec<Proc> = (1..=3).map(|i| worker(&url, &format!("w{i}"))).collect();
    let status = coord.wait(Duration::from_secs(120));
    let output = coord.output();
    assert_eq!(status, 0, "{output}");
    for (i, w) in workers.iter_mut().enumerate() {
        assert_eq!(
            w.wait(Duration::from_secs(30)),
            0,
            "worker {i}:\n{}",
            w.output()
        );
        assert!(w.output().contains("joined run"), "{}", w.output());
    }
    // The terminal shows the clocks beside the table.
    assert!(output.contains("workers (clock offset"), "{output}");
    assert!(
        output.contains("clocks rate-1000: latencies between processes are within ±"),
        "{output}"
    );

    let folder = common::results_dir(&dir.path().join("results"));
    let summary = common::summary(&folder);
    common::assert_all_passed(&summary);
    assert_eq!(summary.verdict, "passed");
    let worst = assert_clocks_bounded(&summary, 3);
    let page = std::fs::read_to_string(folder.join("report.html")).unwrap();
    for id in ["w1", "w2", "w3"] {
        assert!(
            page.contains(&format!("{id} on ")),
            "report.html lists worker {id}"
        );
    }
    let mut ids: Vec<&str> = summary.run.workers.iter().map(|w| w.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["w1", "w2", "w3"]);

    let (_, v) = summary.variants().next().unwrap();
    assert_counts_add_up(v, 4);
    // 1000 msg/s for 2.5 s, every fourth message from each process.
    assert_eq!(v.ledger.published, 2_500);
    for p in &drives(v)[0].processes {
        assert_eq!(p.counts.unwrap().published, 625, "{p:?}");
    }
    // Latencies from every process's stamps, one histogram.
    assert!(common::metric(v, "e2e_latency.p50") > 0.0);
    let bound = common::metric(v, "clock_uncertainty");
    // A publisher on one worker and a consumer on another: both bounds.
    assert!((bound - 2.0 * worst).abs() < 0.01, "{bound} vs 2 x {worst}");
}

#[test]
fn workers_against_the_local_3_node_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let profile = profile(dir.path(), 3, 300, "1s", "", "");
    let mut coord = coordinator(dir.path(), &profile, &["--workers", "2", "--cluster", "3"]);
    let url = worker_url(&mut coord);
    assert_eq!(url.split(',').count(), 3, "{url}");
    let _workers: Vec<Proc> = (1..=2).map(|i| worker(&url, &format!("c{i}"))).collect();
    let status = coord.wait(Duration::from_secs(180));
    assert_eq!(status, 0, "{}", coord.output());
    let summary = common::summary(&common::results_dir(&dir.path().join("results")));
    common::assert_all_passed(&summary);
    assert_eq!(summary.run.server.cluster_size, Some(3));
    assert_eq!(summary.run.server.replicas, 3);
    assert_clocks_bounded(&summary, 2);
    let (_, v) = summary.variants().next().unwrap();
    assert_counts_add_up(v, 3);
}

#[test]
fn a_worker_killed_mid_run_leaves_an_incomplete_run_with_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap();
    // A short AckWait: what the dead worker held unacked comes back to
    // the others; a short drain: what it acked never will.
    let profile = profile(
        dir.path(),
        3,
        500,
        "4s",
        "drain_timeout = \"4s\"",
        "ack_wait = \"1s\"",
    );
    let mut coord = coordinator(
        dir.path(),
        &profile,
        &["--workers", "2", "--worker-silence", "2s"],
    );
    let url = worker_url(&mut coord);
    let mut doomed = worker(&url, "doomed");
    let _survivor = worker(&url, "survivor");
    // The worker names its share when the drive is prepared; from there,
    // into the measured window (500 ms lead-in, 500 ms warm-up, 4 s).
    doomed.wait_for("latency rate-500: publishers [", Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(2_000));
    doomed.kill();
    let status = coord.wait(Duration::from_secs(120));
    let output = coord.output();
    assert_eq!(status, 1, "an incomplete run fails:\n{output}");
    assert!(output.contains("worker doomed"), "{output}");
    assert!(output.contains("is gone"), "{output}");

    let summary = common::summary(&common::results_dir(&dir.path().join("results")));
    assert_eq!(summary.verdict, "incomplete");
    let doomed_info = summary
        .run
        .workers
        .iter()
        .find(|w| w.id == "doomed")
        .unwrap();
    assert_eq!(doomed_info.status, "lost");
    assert!(
        doomed_info.detail.as_deref().unwrap().contains("silent"),
        "{doomed_info:?}"
    );
    let survivor = summary
        .run
        .workers
        .iter()
        .find(|w| w.id == "survivor")
        .unwrap();
    assert_eq!(survivor.status, "ok");

    let (_, v) = summary.variants().next().unwrap();
    let error = v.error.as_deref().expect("the variant is marked");
    assert!(error.starts_with("incomplete: "), "{error}");
    assert!(error.contains("doomed"), "{error}");
    // What the others measured is kept: their counts, the merged metrics.
    let d = &drives(v)[0];
    let lost = d.processes.iter().find(|p| p.process == "doomed").unwrap();
    assert_eq!(lost.status, "lost");
    assert_eq!(lost.counts, None);
    for p in d.processes.iter().filter(|p| p.process != "doomed") {
        assert_eq!(p.status, "ok", "{p:?}");
        assert!(p.counts.unwrap().published > 0, "{p:?}");
    }
    assert!(common::metric(v, "publish_rate") > 0.0);
    assert!(v.ledger.published > 0);
    assert!(common::metric(v, "e2e_latency.p50") > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_another_version_is_refused_with_both_versions_named() {
    // Coordinator side: a worker announcing another jsbench is refused,
    // and the run goes on with one that matches.
    let dir = tempfile::tempdir().unwrap();
    let profile = profile(dir.path(), 2, 200, "500ms", "", "");
    let mut coord = coordinator(
        dir.path(),
        &profile,
        &["--workers", "1", "--group", "vcheck"],
    );
    let url = worker_url(&mut coord);
    let client = async_nats::connect(url.as_str()).await.unwrap();
    let mut inbox = client
        .subscribe(protocol::worker_subject("vcheck", "old"))
        .await
        .unwrap();
    client.flush().await.unwrap();
    let mut old = Identity::current();
    old.jsbench_version = "0.0.0-old".into();
    let announce = Announce {
        id: "old".into(),
        identity: old,
        host: "elsewhere".into(),
        pid: 1,
        cores: 1,
        nonce: "n1".into(),
    };
    // Announced again and again, as a real worker does: the first may
    // reach the server before the coordinator's subscription.
    let announcer = {
        let (client, body) = (client.clone(), key().seal_announce(&announce).unwrap());
        tokio::spawn(async move {
            loop {
                let _ = client
                    .publish(protocol::announce_subject("vcheck"), body.clone().into())
                    .await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    let msg = tokio::time::timeout(Duration::from_secs(30), inbox.next())
        .await
        .expect("an answer to the announcement")
        .unwrap();
    announcer.abort();
    let opened = key().open::<Command>(auth::COMMAND, &msg.payload).unwrap();
    let Command::Refuse { reason, .. } = opened.value else {
        panic!("not a refusal: {}", String::from_utf8_lossy(&msg.payload));
    };
    let mine = env!("CARGO_PKG_VERSION");
    assert!(reason.contains("jsbench 0.0.0-old against"), "{reason}");
    assert!(reason.contains(mine), "{reason}");
    let mut real = Proc::spawn(
        jsbench()
            .args([
                "worker", "-s", &url, "--once", "--group", "vcheck", "--name", "new",
            ])
            .env(SECRET_ENV, SECRET)
            .env_remove("NATS_CONTEXT"),
    );
    let status = tokio::task::spawn_blocking(move || {
        let status = coord.wait(Duration::from_secs(120));
        (status, coord.output())
    })
    .await
    .unwrap();
    assert_eq!(status.0, 0, "{}", status.1);
    assert!(
        status
            .1
            .contains("warning: worker old (elsewhere, pid 1) refused: it runs jsbench 0.0.0-old"),
        "{}",
        status.1
    );
    assert_eq!(
        real.wait(Duration::from_secs(30)),
        0,
        "worker:\n{}\ncoordinator:\n{}",
        real.output(),
        status.1
    );
    let summary = common::summary(&common::results_dir(&dir.path().join("results")));
    assert_eq!(summary.run.workers.len(), 1);
    assert_eq!(summary.run.workers[0].id, "new");

    // Worker side: a refusal ends the worker with status 2 and the reason.
    let server = common::server();
    let client = async_nats::connect(server.url()).await.unwrap();
    let mut announces = client
        .subscribe(protocol::announce_subject("default"))
        .await
        .unwrap();
    let mut refused = Proc::spawn(
        jsbench()
            .args(["worker", "-s", server.url(), "--name", "refused"])
            .env(SECRET_ENV, SECRET)
            .env_remove("NATS_CONTEXT"),
    );
    let msg = tokio::time::timeout(Duration::from_secs(30), announces.next())
        .await
        .expect("the worker announces itself")
        .unwrap();
    let heard: Announce = key().open_announce(&msg.payload).unwrap();
    assert_eq!(heard.id, "refused");
    assert_eq!(heard.identity, Identity::current());
    let refuse = Command::Refuse {
        reason: "it runs jsbench 9.9.9 against 0.1.0".into(),
        nonce: heard.nonce.clone(),
    };
    client
        .publish(
            protocol::worker_subject("default", "refused"),
            key().seal_command("r", 1, &refuse).unwrap().into(),
        )
        .await
        .unwrap();
    client.flush().await.unwrap();
    let (code, output) = tokio::task::spawn_blocking(move || {
        let code = refused.wait(Duration::from_secs(30));
        (code, refused.output())
    })
    .await
    .unwrap();
    assert_eq!(code, 2, "{output}");
    assert!(
        output.contains(
            "error: the coordinator refused this worker: it runs jsbench 9.9.9 against 0.1.0"
        ),
        "{output}"
    );
}

#[test]
fn bad_worker_input_is_named_before_anything_starts() {
    let out = common::run(
        jsbench()
            .args(["worker"])
            .env_remove("NATS_URL")
            .env_remove("NATS_CONTEXT"),
    );
    let (_, stderr) = common::text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("jsbench worker needs the server the coordinator measures"),
        "{stderr}"
    );

    // Issue 51: a worker with no secret would obey anyone; it refuses to
    // start, saying how to make one.
    let out = common::run(
        jsbench()
            .args(["worker", "-s", "nats://127.0.0.1:1"])
            .env_remove(SECRET_ENV),
    );
    let (_, stderr) = common::text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for needle in [
        "--secret-file",
        SECRET_ENV,
        "head -c 32 /dev/urandom",
        "--insecure-no-secret",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }

    let out = common::run(jsbench().args(["worker", "-s", "nats://127.0.0.1:1", "--group", "a.b"]));
    let (_, stderr) = common::text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--group \"a.b\" is not usable"), "{stderr}");

    let out = common::run(jsbench().args(["run", "quick", "--workers", "2", "--group", "x y"]));
    let (_, stderr) = common::text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--group \"x y\" is not usable"), "{stderr}");

    let out = common::run(jsbench().args(["run", "quick", "--workers", "0"]));
    let (_, stderr) = common::text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--workers"), "{stderr}");
}

/// Naks, ignored deliveries and terms on a durable shared by three
/// processes: a message nak'ed on one host is often redelivered to
/// another, so its fate is only right if the ledgers and delivery logs
/// merge sequence by sequence across processes.
#[test]
fn redeliveries_across_workers_are_paired_sequence_by_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(
        dir.path(),
        "redeliver",
        "[[scenario]]\nkind = \"redelivery\"\nduration = \"1500ms\"\nrate = 400\npublishers = 3\n\
         baseline = false\n\
         [scenario.consumer]\nconsumers = 3\nack_wait = \"500ms\"\nmax_deliver = 3\nbatch = 20\n\
         [scenario.behaviour]\nseed = 3\nnak = 0.2\nignore = 0.1\nterm = 0.05\n\
         poison = { fraction = 0.05, fail = \"nak\" }\n",
    );
    let mut coord = coordinator(dir.path(), &profile, &["--workers", "2"]);
    let url = worker_url(&mut coord);
    let _workers: Vec<Proc> = (1..=2).map(|i| worker(&url, &format!("r{i}"))).collect();
    let status = coord.wait(Duration::from_secs(120));
    assert_eq!(status, 0, "{}", coord.output());
    let summary = common::summary(&common::results_dir(&dir.path().join("results")));
    // "every message ends as planned" pairs each sequence's deliveries,
    // wherever they happened.
    common::assert_all_passed(&summary);
    let (_, v) = summary.variants().next().unwrap();
    assert!(v.ledger.redeliveries > 0, "{:?}", v.ledger);
    assert!(v.ledger.termed > 0, "{:?}", v.ledger);
    let d = &drives(v)[0];
    assert_eq!(d.processes.len(), 3, "{d:?}");
    let mut sum = PartCounts::default();
    for p in &d.processes {
        assert_eq!(p.status, "ok", "{p:?}");
        sum += p.counts.unwrap();
    }
    assert_eq!(sum.published, v.ledger.published);
    assert_eq!(sum.deliveries, v.ledger.deliveries);
    assert_eq!(sum.naks, v.ledger.naks);
    // Deliveries outnumber messages: redeliveries, counted once across
    // processes by the merged ledger.
    assert_eq!(
        v.ledger.deliveries,
        v.ledger.delivered + v.ledger.redeliveries,
        "{:?}",
        v.ledger
    );
}

/// Whether this machine lets a test put a process in network (and PID)
/// namespaces of its own; the reason when it does not.
fn namespaces() -> Result<(), String> {
    let out = std::process::Command::new("unshare")
        .args([
            "-rn",
            "--pid",
            "--fork",
            "--kill-child",
            "sh",
            "-c",
            "ip link set lo up",
        ])
        .output()
        .map_err(|e| format!("unshare: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// A worker on another network stack, as on another host: its own network
/// namespace, where only its own loopback exists. It reaches the server
/// through a Unix socket (the filesystem is shared): a relay in the
/// namespace turns its loopback port into the socket, one outside turns
/// the socket into the server's port.
#[test]
fn a_worker_in_its_own_network_namespace_joins_through_a_unix_socket() {
    // A skip would read as a pass: a machine without namespaces fails here.
    if let Err(why) = namespaces() {
        panic!(
            "this machine cannot make a network namespace (unshare -rn --pid: {why}); the test \
             needs user and network namespaces (run as root, or allow unprivileged user \
             namespaces: sysctl kernel.unprivileged_userns_clone=1)"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let profile = profile(dir.path(), 2, 600, "2s", "", "");
    let mut coord = coordinator(dir.path(), &profile, &["--workers", "1"]);
    let url = worker_url(&mut coord);
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let socket = dir.path().join("nats.sock");
    let _outside = jsbench::server::relay::Relay::start(
        jsbench::server::relay::Endpoint::Unix(socket.clone()),
        jsbench::server::relay::Endpoint::Tcp(([127, 0, 0, 1], port).into()),
    )
    .unwrap();
    let inside = if port == 4222 { 4223 } else { 4222 };
    // First the server's own port, which the namespace cannot reach; then
    // the relay's.
    let script = format!(
        "ip link set lo up; \
         \"$JSB\" relay --listen 127.0.0.1:{inside} --to unix:{socket} & sleep 0.5; \
         \"$JSB\" worker -s nats://127.0.0.1:{port} --once --name direct --timeout 1s; \
         echo direct-exit=$?; \
         exec \"$JSB\" worker -s nats://127.0.0.1:{inside} --once --name ns1",
        socket = socket.display()
    );
    let mut worker = Proc::spawn(
        std::process::Command::new("unshare")
            .args([
                "-rn",
                "--pid",
                "--fork",
                "--kill-child",
                "sh",
                "-c",
                &script,
            ])
            .env("JSB", env!("CARGO_BIN_EXE_jsbench"))
            .env(SECRET_ENV, SECRET)
            .env_remove("NATS_URL")
            .env_remove("NATS_CONTEXT"),
    );
    let status = coord.wait(Duration::from_secs(120));
    assert_eq!(
        status,
        0,
        "{}\n--- worker:\n{}",
        coord.output(),
        worker.output()
    );
    assert_eq!(
        worker.wait(Duration::from_secs(30)),
        0,
        "{}",
        worker.output()
    );
    let out = worker.output();
    assert!(
        out.contains("direct-exit=") && !out.contains("direct-exit=0"),
        "the server's port is out of the namespace's reach: {out}"
    );
    assert!(out.contains("joined run"), "{out}");

    let summary = common::summary(&common::results_dir(&dir.path().join("results")));
    common::assert_all_passed(&summary);
    let ids: Vec<&str> = summary.run.workers.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids, ["ns1"]);
    let (_, v) = summary.variants().next().unwrap();
    assert_counts_add_up(v, 2);
}

/// A recruiting that finds too few workers stops what it started: its
/// beat told workers the run was alive and kept doing so, in a process
/// that had given the run up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recruiting_that_fails_stops_its_beat() {
    let server = common::server();
    let client = async_nats::connect(server.url()).await.unwrap();
    let options = jsbench::worker::coordinator::RecruitOptions {
        count: 1,
        group: "lonely".into(),
        timeout: Duration::from_millis(300),
        silence: Duration::from_secs(5),
        key: key(),
    };
    let progress = jsbench::system::progress::Progress::hidden();
    let mut beats = client
        .subscribe(protocol::beat_subject("lonely", "*"))
        .await
        .unwrap();
    client.flush().await.unwrap();
    let recruited =
        jsbench::worker::coordinator::recruit(&client, &options, server.url(), &progress).await;
    let Err(e) = recruited else {
        panic!("recruited a worker nobody started")
    };
    assert!(format!("{e:#}").contains("lonely"), "{e:#}");
    // Beats sent while recruiting may still be in flight: take them, then
    // listen for three beat intervals.
    while tokio::time::timeout(Duration::from_millis(200), beats.next())
        .await
        .is_ok()
    {}
    let after = tokio::time::timeout(Duration::from_millis(1_500), beats.next()).await;
    assert!(after.is_err(), "the failed recruiting still beats");
}

/// Issue 51: a raw NATS client that can publish on the workers' subjects
/// (the shared-cluster case) recruited an idle worker, got `ok` to a 5 ms
/// clock adjustment and made it exit; a drive with a 1 TiB message was
/// run as handed. Now everything not sealed with the shared secret is
/// ignored, a genuine command replayed is refused, a drive out of a
/// profile's bounds is refused with its error, and the worker keeps
/// serving its real coordinator throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_client_cannot_recruit_adjust_or_stop_a_worker() {
    let server = common::server();
    let hostile = async_nats::connect(server.url()).await.unwrap();
    let subject = protocol::worker_subject("hostile", "w1");
    // Everything sent to the worker, as anyone on the cluster may see it.
    let mut sniffed = hostile.subscribe(subject.clone()).await.unwrap();
    let mut announces = hostile
        .subscribe(protocol::announce_subject("hostile"))
        .await
        .unwrap();
    hostile.flush().await.unwrap();
    let mut worker = Proc::spawn(
        jsbench()
            .args([
                "worker",
                "-s",
                server.url(),
                "--group",
                "hostile",
                "--name",
                "w1",
            ])
            .env(SECRET_ENV, SECRET)
            .env_remove("NATS_CONTEXT"),
    );
    let msg = tokio::time::timeout(Duration::from_secs(30), announces.next())
        .await
        .expect("the worker announces itself")
        .unwrap();
    // The nonce is readable by all; only the secret makes a recruit count.
    let sealed: auth::Sealed = serde_json::from_slice(&msg.payload).unwrap();
    let announce: Announce = serde_json::from_str(&sealed.body).unwrap();
    let unanswered = |payload: Vec<u8>| {
        let (hostile, subject) = (hostile.clone(), subject.clone());
        async move {
            let asked = hostile.request(subject, payload.into());
            tokio::time::timeout(Duration::from_secs(1), asked).await
        }
    };
    let recruit = Command::Recruit {
        run: "evil".into(),
        coordinator: Identity::current(),
        nonce: announce.nonce.clone(),
    };
    let forged = Key::from_secret(b"a guess at the workers' secret").unwrap();
    for payload in [
        serde_json::to_vec(&recruit).unwrap(),
        Key::insecure().seal_command("evil", 1, &recruit).unwrap(),
        forged.seal_command("evil", 1, &recruit).unwrap(),
        serde_json::to_vec(&Command::Adjust { ns: 5_000_000 }).unwrap(),
        serde_json::to_vec(&Command::Dismiss).unwrap(),
    ] {
        let answer = unanswered(payload).await;
        assert!(
            answer.is_err(),
            "the worker answered a stranger: {answer:?}"
        );
    }

    // The real coordinator recruits it, its clock measured and corrected.
    let coordinator = async_nats::connect(server.url()).await.unwrap();
    let options = jsbench::worker::coordinator::RecruitOptions {
        count: 1,
        group: "hostile".into(),
        timeout: Duration::from_secs(30),
        silence: Duration::from_secs(5),
        key: key(),
    };
    let progress = jsbench::system::progress::Progress::hidden();
    let workers =
        jsbench::worker::coordinator::recruit(&coordinator, &options, server.url(), &progress)
            .await
            .expect("the real coordinator recruits the worker");
    let run = workers.crew.lock().await.run().to_string();
    // In the run: a stranger's adjustment and dismissal are ignored.
    for command in [Command::Adjust { ns: 5_000_000 }, Command::Dismiss] {
        let answer = unanswered(serde_json::to_vec(&command).unwrap()).await;
        assert!(
            answer.is_err(),
            "the worker answered a stranger: {answer:?}"
        );
    }
    // A genuine command recorded off the wire (the clock correction, the
    // last of recruiting) and played again is refused.
    let mut genuine = None;
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), sniffed.next()).await {
        if let Ok(opened) = key().open::<Command>(auth::COMMAND, &m.payload)
            && matches!(opened.value, Command::Adjust { .. })
        {
            genuine = Some(m.payload.to_vec());
        }
    }
    let genuine = genuine.expect("the coordinator's sealed clock correction was seen");
    let answer = unanswered(genuine).await;
    assert!(answer.is_err(), "a replayed command was obeyed: {answer:?}");
    // The worker still serves its coordinator: the clock measured again.
    workers.remeasure().await;
    let info = workers.info().await;
    assert_eq!(info[0].status, "ok", "{info:?}");
    assert!(info[0].residual_offset_us.is_some(), "{info:?}");
    assert!(
        info[0].residual_offset_us.unwrap().abs() < 50_000.0,
        "the clock was shifted: {info:?}"
    );

    // A drive out of a profile's bounds, sealed as the coordinator would
    // seal it: refused with the error, not run.
    let spec = jsbench::drive::DriveSpec::fill(
        "huge".into(),
        "S",
        vec!["s.a".into()],
        (10, 1 << 40),
        Duration::from_secs(1),
    );
    let prepare = Command::Prepare {
        drive: 1,
        spec: Box::new(spec),
        share: jsbench::drive::Share {
            publishers: vec![0],
            consumers: vec![],
        },
    };
    let seq = 1_000_000;
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        coordinator.request(
            subject.clone(),
            key().seal_command(&run, seq, &prepare).unwrap().into(),
        ),
    )
    .await
    .expect("the worker answers its coordinator")
    .unwrap();
    let Reply::Failed { error } = key().open_reply(&run, seq, &reply.payload).unwrap() else {
        panic!("the drive was not refused");
    };
    assert!(
        error.contains(
            "drive.publish.message_size: 1099511627776 is out of range; allowed 24..=1048576"
        ),
        "{error}"
    );
    let dismiss = key()
        .seal_command(&run, seq + 1, &Command::Dismiss)
        .unwrap();
    let reply = coordinator
        .request(subject.clone(), dismiss.into())
        .await
        .unwrap();
    assert!(matches!(
        key().open_reply(&run, seq + 1, &reply.payload).unwrap(),
        Reply::Ok
    ));
    worker.wait_for("run ", Duration::from_secs(10));
    let out = worker.output();
    assert!(out.contains("joined run"), "{out}");
    assert!(out.contains("ignored a command"), "{out}");
    assert!(out.contains("(a replay)"), "{out}");
    assert!(out.contains("refused drive 1"), "{out}");
    assert!(
        worker.child.try_wait().unwrap().is_none(),
        "the worker exited:\n{out}"
    );
}
