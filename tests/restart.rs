//! The restart scenario on servers jsbench starts itself: a SIGKILL mid-run
//! on file storage, the same store restarted, and every PubAcked message
//! still in the stream afterwards; on a 3-node cluster, the stream leader
//! killed and a new one elected. A server given with --server is refused.

mod common;

use std::path::Path;
use std::process::Output;

use common::{jsbench, metric, run, text};
use jsbench::results::summary::{Summary, VariantReport};

/// Runs `body` with `jsbench run` (the embedded server, or `extra` args)
/// and returns the process output and the results folder's summary.
fn run_restart(dir: &Path, body: &str, extra: &[&str]) -> (Output, Option<Summary>) {
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let profile = common::profile(dir, "restart", body);
    let out_dir = dir.join("results");
    let out = run(jsbench()
        .args(["run", profile.to_str().unwrap()])
        .args(extra)
        .args(["--progress", "never", "-o"])
        .arg(&out_dir)
        .env_remove("NATS_URL")
        .env_remove("NATS_CONTEXT")
        .env("TMPDIR", &tmp));
    let summary = std::fs::read_dir(&out_dir)
        .ok()
        .and_then(|mut d| d.next())
        .map(|_| common::summary(&common::results_dir(&out_dir)));
    (out, summary)
}

/// Kills `node` ("leader" or "follower") of an R3 stream 1 s into 3 s at
/// 200 msg/s on a local 3-node cluster, down for 1 s; the run must pass.
fn restart_on_a_3_node_cluster(node: &str) -> Summary {
    fault_on_a_3_node_cluster(node, "kill", "1s")
}

/// [`restart_on_a_3_node_cluster`] with the fault (`kill`, `cut`,
/// `pause`) and its length named.
fn fault_on_a_3_node_cluster(node: &str, fault: &str, down_for: &str) -> Summary {
    let dir = tempfile::tempdir().unwrap();
    let (out, summary) = run_restart(
        dir.path(),
        &format!(
            "[[scenario]]\nkind = \"restart\"\nduration = \"3s\"\nrate = 200\n\
             kill_after = \"1s\"\ndown_for = \"{down_for}\"\nnode = \"{node}\"\n\
             fault = \"{fault}\"\n\
             [scenario.consumer]\nack_wait = \"2s\"\n"
        ),
        &["--cluster", "3"],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let summary = summary.expect("a results folder");
    common::assert_all_passed(&summary);
    summary
}

fn only_variant(summary: &Summary) -> &VariantReport {
    let variants: Vec<&VariantReport> = summary.variants().map(|(_, v)| v).collect();
    assert_eq!(variants.len(), 1, "one variant");
    variants[0]
}

#[test]
fn a_killed_server_restarts_on_its_store_and_keeps_every_pub_acked_message() {
    let dir = tempfile::tempdir().unwrap();
    let (out, summary) = run_restart(
        dir.path(),
        "[[scenario]]\nkind = \"restart\"\nduration = \"3s\"\nrate = 400\n\
         kill_after = \"1s\"\ndown_for = \"800ms\"\n[scenario.consumer]\nack_wait = \"2s\"\n",
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let summary = summary.expect("a results folder");
    common::assert_all_passed(&summary);
    let v = only_variant(&summary);
    let survived = v
        .invariants
        .iter()
        .find(|i| i.name == "every PubAcked message survived the restart")
        .expect("the survival invariant is checked");
    assert!(survived.passed, "{}", survived.detail);
    // Nothing is acknowledged while no server runs: the publish outage
    // spans at least the planned downtime.
    assert!(
        metric(v, "outage.publish") >= 800.0,
        "publish outage {} ms shorter than the downtime",
        metric(v, "outage.publish")
    );
    assert!(metric(v, "restart_time") >= 800.0);
    assert!(metric(v, "acks_resumed_after_restart") >= 0.0);
    // Publishes the outage left unanswered were resent with the same id,
    // and the ones the server had stored before it died were not stored
    // twice (checked by "no message stored twice").
    assert!(metric(v, "resends") > 0.0, "the outage forced resends");
    assert_eq!(v.ledger.lost, 0);
    // 3 s at 400 msg/s, each planned message stored once and acked.
    assert_eq!(v.ledger.persisted, 1200);
    assert_eq!(v.ledger.acked, 1200);
}

#[test]
fn killing_the_stream_leader_of_a_3_node_cluster_elects_a_new_one() {
    let summary = restart_on_a_3_node_cluster("leader");
    let v = only_variant(&summary);
    assert_eq!(v.params["replicas"], 3);
    let before = v.params["leader_before"].as_str().expect("a leader before");
    assert_eq!(v.params["killed_node"].as_str(), Some(before));
    assert!(v.params["leader_after"].as_str().is_some(), "a new leader");
    assert!(metric(v, "election_gap") > 0.0);
    // The telemetry of the surviving nodes saw the stream's leader move
    // (when the election went to another node: the restarted one may win
    // it back between two samples).
    let after = v.params["leader_after"].as_str().unwrap();
    if after != before {
        let moved = format!("{before} at ");
        assert!(
            v.warnings
                .iter()
                .any(|w| w.contains("a stream leader moved") && w.contains(&moved)),
            "{:?}",
            v.warnings
        );
    }
    // A leaderless stream stores nothing, so PubAcks resume only after the
    // election: the gap, probed every 50 ms, cannot trail the publish
    // outage by more than a probe and its round trip (timed with the
    // context's 5 s request timeout, it once read 5.02 s against a 4.63 s
    // outage). The slack is for a loaded machine's round trips.
    assert!(
        metric(v, "election_gap") <= metric(v, "outage.publish") + 1_000.0,
        "election {} ms after an outage of {} ms",
        metric(v, "election_gap"),
        metric(v, "outage.publish")
    );
    assert_eq!(v.ledger.lost, 0);
}

#[test]
fn killing_a_follower_of_a_3_node_cluster_keeps_the_leader_and_every_message() {
    let summary = restart_on_a_3_node_cluster("follower");
    let v = only_variant(&summary);
    assert_eq!(v.name, "kill-follower");
    let leader = v.params["leader_before"].as_str().expect("a leader");
    let killed = v.params["killed_node"].as_str().unwrap();
    assert_ne!(killed, leader, "a follower, not the leader, was killed");
    assert_eq!(
        v.params["leader_after"].as_str(),
        Some(leader),
        "the quorum held: no election"
    );
    assert!(v.metric("election_gap").is_none());
    assert_eq!(v.ledger.lost, 0);
}

/// The routes of a node are cut at the relays they run through: every
/// route of the node goes down (its peers keep theirs to each other), and
/// every PubAcked message is read back once they are let through again.
#[test]
fn cutting_the_stream_leaders_routes_keeps_every_pub_acked_message() {
    let summary = fault_on_a_3_node_cluster("leader", "cut", "2s");
    let v = only_variant(&summary);
    assert_eq!(v.name, "cut-leader");
    let cut = v.params["killed_node"].as_str().unwrap();
    assert_eq!(v.params["leader_before"].as_str(), Some(cut));
    assert!(
        metric(v, "heal_time") >= 2000.0,
        "{}",
        metric(v, "heal_time")
    );
    assert!(v.metric("restart_time").is_none(), "nothing was restarted");
    assert!(
        v.warnings
            .iter()
            .any(|w| w.contains(&format!("{cut} had 0 of its"))),
        "the telemetry saw every route of the node go: {:?}",
        v.warnings
    );
    let held = v
        .invariants
        .iter()
        .find(|i| i.name == "the node's routes were cut and healed")
        .unwrap();
    assert!(held.passed, "{held:?}");
    assert_eq!(v.ledger.lost, 0);
}

#[test]
fn pausing_a_followers_routes_holds_the_quorum_and_every_message() {
    let summary = fault_on_a_3_node_cluster("follower", "pause", "2s");
    let v = only_variant(&summary);
    assert_eq!(v.name, "pause-follower");
    let leader = v.params["leader_before"].as_str().expect("a leader");
    assert_ne!(v.params["killed_node"].as_str(), Some(leader));
    assert_eq!(v.params["leader_after"].as_str(), Some(leader));
    assert_eq!(v.ledger.lost, 0);
}

#[test]
fn a_route_fault_needs_a_local_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let (out, summary) = run_restart(
        dir.path(),
        "[[scenario]]\nkind = \"restart\"\nduration = \"2s\"\nrate = 100\n\
         kill_after = \"500ms\"\nfault = \"cut\"\n",
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("add --cluster 3"), "{stderr}");
    assert!(summary.is_none(), "nothing ran");
}

#[test]
fn a_follower_needs_a_replicated_stream() {
    let dir = tempfile::tempdir().unwrap();
    let (out, summary) = run_restart(
        dir.path(),
        "[[scenario]]\nkind = \"restart\"\nduration = \"2s\"\nrate = 100\n\
         kill_after = \"500ms\"\ndown_for = \"500ms\"\nnode = \"follower\"\n",
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let v = summary.expect("the error is recorded");
    let error = only_variant(&v).error.clone().unwrap_or_default();
    assert!(
        error.contains("no follower") && error.contains("--cluster 3"),
        "{error}"
    );
}

#[test]
fn restart_refuses_a_server_it_did_not_start_before_running_anything() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let (out, summary) = run_restart(
        dir.path(),
        "[[scenario]]\nkind = \"restart\"\nduration = \"1s\"\nrate = 100\nkill_after = \"500ms\"\n",
        &["-s", server.url()],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("scenario restart: the restart scenario kills servers"),
        "{stderr}"
    );
    assert!(stderr.contains("-s/--server"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(summary.is_none(), "nothing ran, so nothing was written");
}

/// A variant that fails mid-run (here a follower asked of a single server,
/// 500 ms into 60 s) stops its publishers before the run goes on: they
/// once kept sending for the whole schedule, into the next variant's
/// measurement, and their threads outlived the run. In-process, so the
/// publisher threads (`jsb-pub-<n>`) can be counted when it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_variant_failing_mid_run_stops_its_publishers() {
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(
        dir.path(),
        "restart",
        "[[scenario]]\nkind = \"restart\"\nduration = \"60s\"\nrate = 100\n\
         kill_after = \"500ms\"\ndown_for = \"500ms\"\nnode = \"follower\"\n",
    );
    let mut options = common::options("", &profile, dir.path());
    options.connection = jsbench::connect::ConnectionRequest::default();
    let outcome = jsbench::run::run(options, tokio_util::sync::CancellationToken::new())
        .await
        .expect("the run records the failed variant");
    let v = common::summary(&outcome.results[0]);
    let error = only_variant(&v).error.clone().unwrap_or_default();
    assert!(error.contains("no follower"), "{error}");
    let publishers: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .filter(|name| {
            name.strip_prefix("jsb-pub-")
                .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
        })
        .collect();
    assert!(publishers.is_empty(), "still running: {publishers:?}");
}
