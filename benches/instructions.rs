//! jsbench's per-message work counted in instructions under Valgrind's
//! callgrind: deterministic where the Criterion timings of hot_path.rs
//! move by 10-20% between runs on a shared machine, so a change of a few
//! percent in jsbench's own cost shows.
//!
//! The bench re-executes itself under `valgrind --tool=callgrind` once per
//! case and iteration count, collecting only inside [`measured`] (set-up
//! and process start are not counted) and, inside it, not in what runs
//! once a second or once a quarter of a second rather than per message (a
//! second's interval histogram compressed, the clock re-anchored), whose
//! share would depend on how slowly Valgrind runs. A case is run for `N1`
//! and `N2` iterations; `(Ir(N2) - Ir(N1)) / (N2 - N1)` is its count a
//! message, with the loop's own few instructions in it (the `loop` case).
//!
//! ```sh
//! cargo bench --bench instructions                          # the table
//! cargo bench --bench instructions -- --save FILE           # and a baseline
//! cargo bench --bench instructions -- --check FILE [--threshold 2]
//! ```
//!
//! It writes target/instructions/customSmallerIsBetter.json
//! (github-action-benchmark) and bencher.json (Bencher Metric Format);
//! `--check` exits 1 when a count rose by more than the threshold (percent,
//! default 2) against a saved file, 2 when the file does not fit.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;

mod support;

use anyhow::{Context, Result, bail};
use jsbench::record::clock;
use jsbench::record::histogram::Recorder;
use jsbench::record::ledger::{Event, LedgerShard};
use jsbench::record::stamp::Stamp;
use jsbench::results::ci::{ActionBenchmark, BencherMetric};
use support::{Bookkeeping, ID_PREFIX, SUBJECT};

const CASE_ENV: &str = "JSBENCH_IR_CASE";
const ITERATIONS_ENV: &str = "JSBENCH_IR_ITERATIONS";
const N1: u64 = 20_000;
const N2: u64 = 120_000;
/// Functions outside the per-message count (see the module doc): callgrind
/// stops collecting on entry and resumes on return.
const ONCE_IN_A_WHILE: &[&str] = &["*Intervals*close*", "*TscClock*reanchor*"];

/// A case's name and how to run it `n` times.
type Case = (&'static str, fn(u64));

/// Every case.
const CASES: &[Case] = &[
    ("loop", |n| {
        measured(n, |i| {
            black_box(i);
        })
    }),
    ("clock/read", |n| {
        measured(n, |_| {
            black_box(clock::now_ns());
        })
    }),
    ("consumer/per_delivery", consumer_per_delivery),
    ("consumer/direct_delivery", direct_delivery),
    ("consumer/histogram_record", histogram_record),
    ("consumer/ledger_mark", ledger_mark),
    ("publisher/per_message", |n| {
        publisher_per_message(n, None, true)
    }),
    ("publisher/per_message_with_id", |n| {
        publisher_per_message(n, Some(ID_PREFIX), true)
    }),
    ("publisher/per_message_async_nats", |n| {
        publisher_per_message(n, None, false)
    }),
    ("publisher/per_message_with_id_async_nats", |n| {
        publisher_per_message(n, Some(ID_PREFIX), false)
    }),
];

/// The loop callgrind counts in. Never inlined: its symbol is what
/// `--toggle-collect` names.
#[inline(never)]
fn measured(n: u64, mut f: impl FnMut(u64)) {
    for i in 1..=n {
        f(i);
    }
}

/// As benches/hot_path.rs's `consumer/per_delivery`: what the consumer
/// loop does per delivery besides the ack.
fn consumer_per_delivery(n: u64) {
    let mut bookkeeping = Bookkeeping::new();
    measured(n, |seq| bookkeeping.deliver(seq));
    black_box(bookkeeping);
}

fn histogram_record(n: u64) {
    let mut r = Recorder::new();
    let mut v = 1_000u64;
    measured(n, |_| {
        v = (v * 7 + 13) % 10_000_000;
        r.record(black_box(v));
    });
    black_box(r);
}

fn ledger_mark(n: u64) {
    let mut ledger = LedgerShard::new();
    measured(n, |seq| ledger.mark(black_box(seq), Event::Delivered));
    black_box(ledger);
}

/// As benches/hot_path.rs's `publisher/per_message` (and `_with_id`,
/// `_async_nats`): the pacer's send time and the message composed, through
/// the calls the sending loop makes: a wire frame appended to the direct
/// connection's buffer (`direct`), or async-nats' message and headers.
fn publisher_per_message(n: u64, msg_id: Option<&str>, direct: bool) {
    let (schedule, pacer) = support::unpaced();
    let mut composer = support::composer(msg_id);
    let mut frames: Vec<u8> = Vec::with_capacity(64 * 1024);
    measured(n, |k| {
        let (intended, sent) = pacer.send_at(schedule.intended_ns(k));
        if direct {
            composer.compose_frame(&mut frames, SUBJECT, intended, sent, k, k, 128, true);
            // Emptied as the sending thread's flush would.
            if frames.len() >= 32 * 1024 {
                black_box(&frames);
                frames.clear();
            }
        } else {
            black_box(composer.compose(intended, sent, k, k, 128, true));
        }
    });
}

/// The direct consumer's whole per-delivery path (as
/// tests/allocations.rs's): a MSG frame parsed in place from a read, its
/// `$JS.ACK` reply read, the bookkeeping and the `+ACK` appended; once a
/// read's worth (500), the acks flushed and recorded as written.
fn direct_delivery(n: u64) {
    use jsbench::consume::direct::Direct;
    use jsbench::consume::{ConsumerConfig, ConsumerProgress};
    use jsbench::wire::frame;
    use std::sync::Arc;

    const PER_READ: u64 = 500;
    let now = clock::now_ns();
    let config = ConsumerConfig::acking_all("S", n, now);
    let mut direct = Direct::new(config, Arc::new(ConsumerProgress::default()), b"_INBOX.a");
    let mut payload = vec![b'.'; 128];
    Stamp {
        intended_ns: now - 250_000,
        sent_ns: now - 200_000,
        publisher: 0,
        publisher_seq: 1,
    }
    .write(&mut payload);
    let mut read = Vec::with_capacity(n as usize * 220);
    for seq in 1..=n {
        let reply = format!("$JS.ACK.S.D.1.{seq}.{seq}.1700000000000000000.0");
        read.extend_from_slice(format!("MSG s.0 1 {reply} {}\r\n", payload.len()).as_bytes());
        read.extend_from_slice(&payload);
        read.extend_from_slice(b"\r\n");
    }
    let mut out = Vec::with_capacity(64 * 1024);
    let mut at = 0;
    measured(n, |seq| {
        let head = frame::parse(&read[at..])
            .expect("a well-formed frame")
            .expect("a whole frame");
        let whole = &read[at..at + head.len];
        direct.on_frame(frame::lend(whole, head), &mut out, clock::now_ns());
        at += head.len;
        if seq % PER_READ == 0 {
            direct.flushed(clock::now_ns());
            out.clear();
        }
    });
    assert_eq!(direct.report().received, n);
    black_box(direct);
}

fn main() {
    if let Ok(case) = std::env::var(CASE_ENV) {
        return child(&case);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        return; // `cargo bench -- --list` asks every target for its benches
    }
    match parent(&args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    }
}

/// Under callgrind: one case, `n` times, after a first call outside the
/// count (the clock's calibration, first allocations).
fn child(case: &str) {
    let n: u64 = std::env::var(ITERATIONS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{ITERATIONS_ENV} must be a whole number"));
    let Some((_, run)) = CASES.iter().find(|(name, _)| *name == case) else {
        panic!("{CASE_ENV}={case:?} names no case");
    };
    black_box(clock::now_ns());
    run(n);
}

struct Options {
    filter: Option<String>,
    save: Option<PathBuf>,
    check: Option<PathBuf>,
    threshold_pct: f64,
}

fn options(args: &[String]) -> Result<Options> {
    let mut o = Options {
        filter: None,
        save: None,
        check: None,
        threshold_pct: 2.0,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .with_context(|| format!("{flag} needs a value"))
        };
        match a.as_str() {
            "--bench" => {}
            "--save" => o.save = Some(value("--save")?.into()),
            "--check" => o.check = Some(value("--check")?.into()),
            "--threshold" => {
                let v = value("--threshold")?;
                o.threshold_pct = v
                    .trim_end_matches('%')
                    .parse()
                    .with_context(|| format!("--threshold {v:?} is not a percentage"))?;
            }
            f if !f.starts_with('-') => o.filter = Some(f.to_string()),
            f => bail!("{f}: unknown option (--save FILE, --check FILE, --threshold PCT)"),
        }
    }
    Ok(o)
}

fn parent(args: &[String]) -> Result<i32> {
    let o = options(args)?;
    let exe = std::env::current_exe().context("finding the bench's own executable")?;
    let dir = PathBuf::from("target/instructions");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut counts = BTreeMap::new();
    println!(
        "{:<34} {:>14} {:>14} {:>10}",
        "case", "Ir(N1)", "Ir(N2)", "Ir/msg"
    );
    for (name, _) in CASES {
        if o.filter
            .as_ref()
            .is_some_and(|f| !name.contains(f.as_str()))
        {
            continue;
        }
        let ir1 = callgrind(&exe, &dir, name, N1)?;
        let ir2 = callgrind(&exe, &dir, name, N2)?;
        let per = (ir2 as f64 - ir1 as f64) / (N2 - N1) as f64;
        println!("{name:<34} {ir1:>14} {ir2:>14} {per:>10.2}");
        counts.insert(name.to_string(), per);
    }
    println!("clock source: {}", clock::source());
    write_ci(&dir, &counts)?;
    if let Some(path) = &o.save {
        let json = serde_json::to_vec_pretty(&counts).context("serialising the counts")?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    match &o.check {
        Some(path) => check(path, &counts, o.threshold_pct),
        None => Ok(0),
    }
}

/// Runs one case under callgrind; its instruction count.
fn callgrind(exe: &Path, dir: &Path, case: &str, n: u64) -> Result<u64> {
    let out = dir.join(format!("callgrind.{}.{n}.out", case.replace('/', "_")));
    let mut cmd = Command::new("valgrind");
    cmd.arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg("--collect-atstart=no")
        .arg("--toggle-collect=*instructions*measured*");
    for f in ONCE_IN_A_WHILE {
        cmd.arg(format!("--toggle-collect={f}"));
    }
    let output = cmd
        .arg(exe)
        .env(CASE_ENV, case)
        .env(ITERATIONS_ENV, n.to_string())
        .output()
        .context(
            "running valgrind (install it: apt-get install valgrind; scripts/setup.sh does)",
        )?;
    if !output.status.success() {
        bail!(
            "valgrind on {case} ({n} iterations) failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text =
        std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    let total = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .with_context(|| format!("{} has no totals line", out.display()))?;
    total
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("{}: totals {total:?} is not a count", out.display()))
}

fn write_ci(dir: &Path, counts: &BTreeMap<String, f64>) -> Result<()> {
    let action: Vec<ActionBenchmark> = counts
        .iter()
        .map(|(name, &value)| ActionBenchmark {
            name: format!("instructions/{name}"),
            unit: "instructions/message".into(),
            value,
            range: None,
            extra: Some(format!("callgrind, (Ir({N2}) - Ir({N1})) / {}", N2 - N1)),
        })
        .collect();
    let bencher: BTreeMap<String, BTreeMap<String, BencherMetric>> = counts
        .iter()
        .map(|(name, &value)| {
            let metric = BencherMetric {
                value,
                lower_value: None,
                upper_value: None,
            };
            (
                format!("instructions/{name}"),
                BTreeMap::from([("instructions".to_string(), metric)]),
            )
        })
        .collect();
    for (file, json) in [
        (
            "customSmallerIsBetter.json",
            serde_json::to_vec_pretty(&action)?,
        ),
        ("bencher.json", serde_json::to_vec_pretty(&bencher)?),
    ] {
        let path = dir.join(file);
        std::fs::write(&path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// 1 when a case's count rose by more than `threshold_pct` against the
/// saved counts; 2 when they share no case.
fn check(path: &Path, counts: &BTreeMap<String, f64>, threshold_pct: f64) -> Result<i32> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let saved: BTreeMap<String, f64> = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a saved instruction count", path.display()))?;
    let mut compared = 0;
    let mut rose = 0;
    for (name, &now) in counts {
        let Some(&before) = saved.get(name) else {
            continue;
        };
        compared += 1;
        let change = (now - before) / before.max(1.0) * 100.0;
        let verdict = if change > threshold_pct {
            rose += 1;
            "ROSE"
        } else {
            "ok"
        };
        println!("{name:<34} {before:>10.2} -> {now:>10.2}  {change:+6.2}%  {verdict}");
    }
    if compared == 0 {
        eprintln!("error: {} shares no case with this run", path.display());
        return Ok(2);
    }
    Ok(i32::from(rose > 0))
}
