//! The power scenario end to end: a server of the variant's own on the
//! power-loss filesystem, loaded, killed, its power cut, restarted and
//! reconciled. Under sync always every PubAcked message survives the
//! cut (the invariant held); under the default sync the loss is reported
//! as a finding and the run still passes; a run whose every check is
//! "not applicable" exits 4, never passes; a run against a server given
//! with --server is refused before anything starts. Needs root,
//! /dev/fuse and the pinned server; fails, never skips, without them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{jsbench, metric, run, text};
use jsbench::results::summary::{Summary, VariantReport};
use jsbench::system::powerfs::PowerFs;

const SURVIVED: &str = "every PubAcked message survived the cut";

/// Runs `body` with `jsbench run` (`extra` args): the output and the
/// results folder.
fn jsbench_power(dir: &Path, body: &str, extra: &[&str]) -> (Output, PathBuf) {
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let profile = common::profile(dir, "power", body);
    let out_dir = dir.join("results");
    let out = run(jsbench()
        .args(["run", profile.to_str().unwrap()])
        .args(extra)
        .args(["--progress", "never", "-o"])
        .arg(&out_dir)
        .env_remove("NATS_URL")
        .env_remove("NATS_CONTEXT")
        .env("TMPDIR", &tmp));
    (out, out_dir)
}

/// [`jsbench_power`] for a run that passes: the output and the summary.
fn run_power(dir: &Path, body: &str, extra: &[&str]) -> (Output, Summary) {
    let (out, out_dir) = jsbench_power(dir, body, extra);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    (out, common::summary(&common::results_dir(&out_dir)))
}

fn variant<'a>(summary: &'a Summary, name: &str) -> &'a VariantReport {
    summary
        .variants()
        .map(|(_, v)| v)
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no variant {name}"))
}

fn survival(v: &VariantReport) -> &jsbench::variant::Invariant {
    v.invariants
        .iter()
        .find(|i| i.name == SURVIVED)
        .unwrap_or_else(|| panic!("{} has no survival check", v.name))
}

/// One run, one power cut per sync setting: 1 s at 300 msg/s each.
#[test]
fn a_power_cut_keeps_every_pub_ack_under_sync_always_and_the_default_loss_is_a_finding() {
    PowerFs::available().unwrap_or_else(|e| {
        panic!(
            "the power scenario needs the power-loss filesystem (run as root with /dev/fuse): {e:#}"
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let (_, summary) = run_power(
        dir.path(),
        "[server]\nsync = [\"default\", \"always\"]\n\
         [[scenario]]\nkind = \"power\"\nduration = \"1s\"\nrate = 300\n\
         cut = [\"power\"]\npub_ack_timeout = \"1s\"\n",
        &[],
    );
    common::assert_all_passed(&summary);

    let always = variant(&summary, "power.sync-always");
    let held = survival(always);
    assert!(held.applicable && held.passed, "{held:?}");
    assert!(
        metric(always, "acked") >= 250.0,
        "{}",
        metric(always, "acked")
    );
    assert_eq!(metric(always, "lost_after_puback"), 0.0);
    assert_eq!(always.params["variant_server.sync"], "always");
    assert_eq!(always.params["stream_after"], "present");

    // The default sync never fsynced the fresh stream: the cut took it,
    // and every PubAcked message with it. A finding, not a failure.
    let default = variant(&summary, "power.sync-default");
    let finding = survival(default);
    assert!(!finding.applicable, "{finding:?}");
    assert!(
        finding.detail.contains("fsyncs every 2 minutes"),
        "{}",
        finding.detail
    );
    let acked = metric(default, "acked");
    assert!(acked >= 250.0, "{acked}");
    assert_eq!(metric(default, "lost_after_puback"), acked);
    assert_eq!(default.params["stream_after"], "gone");
    assert!(metric(default, "cut_unsynced_bytes") > 0.0);
    for v in [always, default] {
        assert!(metric(v, "recovery_time") > 0.0);
        assert!(v.metric("pub_ack_latency.p99").is_some(), "{}", v.name);
    }
}

/// A run whose every check could not apply proved nothing: exit 4 and
/// the verdict "not applicable" (it exited 0, "passed", before), and the
/// terminal shows the variant as n/a. A leader's cut on one server is such
/// a variant, decided before any load.
#[test]
fn a_run_whose_every_check_is_not_applicable_exits_4_and_never_passes() {
    let dir = tempfile::tempdir().unwrap();
    let (out, out_dir) = jsbench_power(
        dir.path(),
        "[[scenario]]\nkind = \"power\"\nduration = \"1s\"\nrate = 100\ncut = [\"power_leader\"]\n",
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(4), "{stdout}\n{stderr}");
    let summary = common::summary(&common::results_dir(&out_dir));
    assert_eq!(summary.verdict, "not applicable", "{summary:#?}");
    assert!(summary.passed() && summary.checked_nothing());
    assert!(stdout.contains("n/a"), "{stdout}");
}

/// A server jsbench did not start cannot be killed or cut: the run is
/// refused before anything starts, naming the flag, where every variant
/// once read "not applicable" and the run passed.
#[test]
fn against_a_server_given_with_server_the_run_is_refused_before_anything_runs() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let (out, out_dir) = jsbench_power(
        dir.path(),
        "[[scenario]]\nkind = \"power\"\nduration = \"1s\"\nrate = 100\n",
        &["--server", server.url()],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("scenario power"), "{stderr}");
    assert!(stderr.contains("-s/--server"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!out_dir.exists(), "nothing ran, so nothing was written");
}

/// On a local cluster the variant's servers are three nodes, each on its
/// own mount: the stream leader's cut alone keeps every PubAck (the
/// quorum's other two hold them, and the struck node catches up from
/// them), where all three cut at once under the default sync is a
/// finding. 1 s at 300 msg/s each.
#[test]
fn on_a_cluster_the_leaders_cut_keeps_every_pub_ack_and_a_cut_of_all_three_is_a_finding() {
    PowerFs::available().unwrap_or_else(|e| {
        panic!(
            "the power scenario needs the power-loss filesystem (run as root with /dev/fuse): {e:#}"
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let (_, summary) = run_power(
        dir.path(),
        "[server]\nreplicas = 3\n\
         [[scenario]]\nkind = \"power\"\nduration = \"1s\"\nrate = 300\n\
         cut = [\"power_leader\", \"power\"]\npub_ack_timeout = \"1s\"\n",
        &["--cluster", "3"],
    );
    common::assert_all_passed(&summary);

    let leader = variant(&summary, "power_leader");
    let held = survival(leader);
    assert!(held.applicable && held.passed, "{held:?}");
    assert!(
        held.detail.contains("quorum") || leader.params["promised"].to_string().contains("quorum")
    );
    let acked = metric(leader, "acked");
    assert!(acked >= 250.0, "{acked}");
    assert_eq!(metric(leader, "lost_after_puback"), 0.0);
    assert_eq!(leader.params["nodes"], 3);
    let struck = leader.params["struck_nodes"].as_array().unwrap();
    assert_eq!(struck.len(), 1, "{struck:?}");
    // The struck node caught up after the stream answered again.
    assert!(metric(leader, "caught_up_time") >= metric(leader, "recovery_time"));
    assert!(metric(leader, "cut_unsynced_bytes") > 0.0);

    let all = variant(&summary, "power");
    let finding = survival(all);
    assert!(!finding.applicable, "{finding:?}");
    assert!(finding.detail.contains("2 minutes"), "{}", finding.detail);
    assert_eq!(all.params["struck_nodes"].as_array().unwrap().len(), 3);
    assert!(all.metric("caught_up_time").is_none());
}

/// Issue 51: a second Ctrl-C exits at once, without destructors, and the
/// power-loss mounts (dead FUSE mounts: "transport endpoint is not
/// connected") and their temporary folder stayed behind. They are now
/// detached and removed on the way out.
#[test]
fn a_second_ctrl_c_leaves_no_mount_and_no_folder_behind() {
    PowerFs::available().unwrap_or_else(|e| {
        panic!(
            "the power scenario needs the power-loss filesystem (run as root with /dev/fuse): {e:#}"
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let profile = common::profile(
        dir.path(),
        "power",
        "[[scenario]]\nkind = \"power\"\nduration = \"60s\"\nrate = 100\ncut = [\"power\"]\n",
    );
    let mut child = jsbench()
        .args([
            "run",
            profile.to_str().unwrap(),
            "--progress",
            "never",
            "-o",
        ])
        .arg(dir.path().join("results"))
        .env_remove("NATS_URL")
        .env_remove("NATS_CONTEXT")
        .env("TMPDIR", &tmp)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ours = |mounts: &str| {
        mounts
            .lines()
            .filter(|l| l.contains(tmp.to_str().unwrap()))
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while ours(&std::fs::read_to_string("/proc/mounts").unwrap()) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no power-loss mount under {} within 60 s",
            tmp.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let pid = child.id() as libc::pid_t;
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid, libc::SIGINT) };
    std::thread::sleep(std::time::Duration::from_millis(100));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert_eq!(ours(&mounts), 0, "mounts left:\n{mounts}");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("jsbench-power-"))
        .collect();
    assert!(
        left.is_empty(),
        "folders left in {}: {left:?}",
        tmp.display()
    );
}
