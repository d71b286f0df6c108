//! Recruiting: workers that announce themselves in the run's group are
//! checked for the same release, asked to join, and put on this process's
//! time base before any load.
//!
//! Apart from leading the drives because it happens once, before the
//! first variant, and has its own failures to explain (too few joined,
//! who was refused and why); what it leaves behind is a [`Crew`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use async_nats::Client;
use futures::StreamExt;

use super::{COMMAND_TIMEOUT, Crew, Heard, Member, Workers, request, tell};
use crate::drive::Share;
use crate::worker::auth::{self, Forward, Key, Link};
use crate::worker::clock::{self, ClockEstimate};
use crate::worker::protocol::{
    Announce, Command, Heartbeat, Identity, Reply, announce_subject, beat_subject,
    progress_subject, worker_subject,
};
use crate::worker::{AbortOnDrop, beat};

/// How `run --workers` finds and watches its workers.
#[derive(Debug, Clone)]
pub struct RecruitOptions {
    pub count: usize,
    pub group: String,
    /// How long to wait for `count` workers before giving up.
    pub timeout: Duration,
    /// A worker silent this long is lost.
    pub silence: Duration,
    /// The secret shared with the workers ([`auth`]).
    pub key: Key,
}

/// How often the coordinator says it is alive; workers give up a run
/// after [`crate::worker::agent::COORDINATOR_SILENCE`] without it.
const BEAT_EVERY: Duration = Duration::from_millis(500);

/// Waits for `options.count` compatible workers, refusing the others, and
/// measures and corrects each one's clock as it joins.
pub async fn recruit(
    client: &Client,
    options: &RecruitOptions,
    urls: &str,
    progress: &crate::system::progress::Progress,
) -> Result<Workers> {
    let group = &options.group;
    let me = Identity::current();
    let run = crate::streams::provision::Names::generate()
        .token()
        .to_lowercase();
    let mut announces = client
        .subscribe(announce_subject(group))
        .await
        .context("subscribing to worker announcements")?;
    let link = Link::new(options.key.clone(), &run);
    let (heard, listener) = listen_for_progress(client, group, &link).await?;
    let beats = link.clone();
    let tasks = vec![
        AbortOnDrop(listener),
        // The coordinator's proof of life: a worker gives its run up when
        // the beat stops. Sealed: a forged beat would hold a worker in a
        // run that is over.
        beat(client, beat_subject(group, &run), BEAT_EVERY, move || {
            beats
                .key
                .seal(auth::BEAT, &beats.run, beats.next(), &"beat")
                .ok()
        }),
    ];
    progress.println(&format!(
        "jsbench: waiting up to {} for {} worker{} in group {group}; on each host run:\n  jsbench worker -s {urls} --group {group}",
        crate::profile::format_duration(options.timeout),
        options.count,
        if options.count == 1 { "" } else { "s" },
    ));
    let mut recruiter = Recruiter {
        client,
        group,
        me,
        link,
        heard,
        progress,
        refused: Vec::new(),
    };
    let deadline = tokio::time::Instant::now() + options.timeout;
    let mut members: Vec<Member> = Vec::new();
    while members.len() < options.count {
        let msg = match tokio::time::timeout_at(deadline, announces.next()).await {
            Ok(Some(msg)) => msg,
            Ok(None) => return Err(anyhow!("the announcement subscription closed")),
            Err(_) => return Err(recruiter.too_few(options, urls, members.len())),
        };
        let announce = match options.key.open_announce(&msg.payload) {
            Ok(a) => a,
            Err(e) => {
                progress.println(&format!(
                    "warning: ignored a worker announcement: {e:#} (a worker with another secret, or not a worker)"
                ));
                continue;
            }
        };
        if let Err(e) = check_announce(&announce) {
            progress.println(&format!("warning: ignored a worker announcement: {e}"));
            continue;
        }
        if members.iter().any(|m| m.announce.id == announce.id) {
            continue;
        }
        if let Some(member) = recruiter.enlist(announce).await {
            members.push(member);
        }
    }
    drop(announces);
    // The crew as recruiting leaves it: every member joined, no drive led
    // yet, and the progress listener and the beat to stop with it.
    let crew = Crew {
        client: client.clone(),
        group: options.group.clone(),
        link: recruiter.link,
        members,
        heard: recruiter.heard,
        silence: options.silence,
        drive: 0,
        label: String::new(),
        local: Share {
            publishers: Vec::new(),
            consumers: Vec::new(),
        },
        parts: Vec::new(),
        record: None,
        halted: 0,
        _tasks: tasks,
    };
    Ok(Workers {
        crew: tokio::sync::Mutex::new(crew),
        log: Mutex::new(Vec::new()),
    })
}

/// Keeps each worker's latest progress and when it came, from the moment
/// recruiting starts: how the coordinator tells who is still there and
/// how far each has got.
async fn listen_for_progress(
    client: &Client,
    group: &str,
    link: &Link,
) -> Result<(Heard, tokio::task::JoinHandle<()>)> {
    let heard: Heard = Arc::default();
    let mut progress_sub = client
        .subscribe(progress_subject(group, &link.run))
        .await
        .context("subscribing to worker progress")?;
    let listener = {
        let (heard, key, run) = (heard.clone(), link.key.clone(), link.run.clone());
        tokio::spawn(async move {
            // Each worker numbers its heartbeats: a replayed one is old.
            let mut seqs: std::collections::HashMap<String, Forward> = Default::default();
            while let Some(msg) = progress_sub.next().await {
                let Ok(opened) = key.open::<Heartbeat>(auth::HEARTBEAT, &msg.payload) else {
                    continue;
                };
                let p = opened.value;
                if opened.run != run
                    || crate::worker::protocol::check_name("worker", &p.worker).is_err()
                    || !seqs.entry(p.worker.clone()).or_default().take(opened.seq)
                {
                    continue;
                }
                heard
                    .lock()
                    .expect("not poisoned")
                    .insert(p.worker.clone(), (Instant::now(), p));
            }
        })
    };
    Ok((heard, listener))
}

/// What the steps of recruiting share: who recruits for which run, where
/// the workers' progress is kept, and the reasons workers were refused
/// (a recruiting that times out lists them).
struct Recruiter<'a> {
    client: &'a Client,
    group: &'a str,
    me: Identity,
    link: Link,
    heard: Heard,
    progress: &'a crate::system::progress::Progress,
    refused: Vec<String>,
}

impl Recruiter<'_> {
    /// Takes one announced worker through joining: its release checked,
    /// its recruit answered, its clock settled; `None` when it was
    /// refused, declined or was let go.
    async fn enlist(&mut self, announce: Announce) -> Option<Member> {
        let subject = worker_subject(self.group, &announce.id);
        if self.refuse_mismatch(&announce, &subject).await {
            return None;
        }
        if !self.ask_to_join(&announce, &subject).await {
            return None;
        }
        let estimate = self.settle_clock(&announce, &subject).await?;
        self.heard
            .lock()
            .expect("not poisoned")
            .insert(announce.id.clone(), (Instant::now(), Heartbeat::default()));
        self.progress.println(&format!(
            "jsbench: worker {} joined ({}, pid {}, {} cores): clock offset {} ± {} (RTT {}), corrected",
            announce.id,
            announce.host,
            announce.pid,
            announce.cores,
            signed_us(estimate.offset_ns),
            us(estimate.uncertainty_ns),
            us(estimate.rtt_ns),
        ));
        Some(Member {
            announce,
            subject,
            clock: estimate,
            residual: None,
            lost: None,
        })
    }

    /// Refuses a worker of another release, telling it why and warning
    /// once per reason: its results could not be merged with this
    /// process's. Says whether it was refused.
    async fn refuse_mismatch(&mut self, announce: &Announce, subject: &str) -> bool {
        let Some(differs) = self.me.mismatch(&announce.identity) else {
            return false;
        };
        let reason = format!(
            "worker {} ({}, pid {}) refused: it runs {differs} (this coordinator's); run the same jsbench release on every host",
            announce.id, announce.host, announce.pid
        );
        let refuse = Command::Refuse {
            reason: reason.clone(),
            nonce: announce.nonce.clone(),
        };
        tell(self.client, &self.link, subject, &refuse).await;
        if !self.refused.contains(&reason) {
            self.progress.println(&format!("warning: {reason}"));
            self.refused.push(reason);
        }
        true
    }

    /// Asks a compatible worker to join this run; says whether it did. A
    /// worker that declines, answers otherwise or not at all is skipped
    /// with a warning.
    async fn ask_to_join(&mut self, announce: &Announce, subject: &str) -> bool {
        let recruit = Command::Recruit {
            run: self.link.run.clone(),
            coordinator: self.me.clone(),
            nonce: announce.nonce.clone(),
        };
        match request(self.client, &self.link, subject, &recruit, COMMAND_TIMEOUT).await {
            Ok(Reply::Joined) => true,
            Ok(Reply::Refused { reason }) => {
                self.progress.println(&format!(
                    "warning: worker {} declined: {reason}",
                    announce.id
                ));
                self.refused.push(reason);
                false
            }
            Ok(other) => {
                self.progress.println(&format!(
                    "warning: worker {} answered a recruit with {other:?}; skipped",
                    announce.id
                ));
                false
            }
            Err(e) => {
                self.progress.println(&format!(
                    "warning: worker {} did not answer its recruit ({e:#}); skipped (does it have this coordinator's secret?)",
                    announce.id
                ));
                false
            }
        }
    }

    /// Puts a joined worker on this process's time base. A worker whose
    /// clock cannot be settled is let go, not trusted: its latencies would
    /// carry an unknown error.
    async fn settle_clock(&self, announce: &Announce, subject: &str) -> Option<ClockEstimate> {
        match correct_clock(self.client, &self.link, subject).await {
            Ok(estimate) => Some(estimate),
            Err(e) => {
                self.progress.println(&format!(
                    "warning: worker {} let go: its clock could not be measured and corrected: {e:#}",
                    announce.id
                ));
                tell(self.client, &self.link, subject, &Command::Dismiss).await;
                None
            }
        }
    }

    /// Why recruiting gave up: how many joined, how to start the rest, and
    /// whom it refused.
    fn too_few(&self, options: &RecruitOptions, urls: &str, joined: usize) -> anyhow::Error {
        let group = self.group;
        let mut text = format!(
            "only {} of {} workers joined within {} (group {group} on {urls}); start them with `jsbench worker -s {urls} --group {group}`, or give --workers-timeout more time",
            joined,
            options.count,
            crate::profile::format_duration(options.timeout)
        );
        if !self.refused.is_empty() {
            text.push_str(&format!("; refused: {}", self.refused.join("; ")));
        }
        anyhow!(text)
    }
}

/// The offset is measured, then corrected on the worker, so every stamp
/// it writes is on this process's time base.
async fn correct_clock(client: &Client, link: &Link, subject: &str) -> Result<ClockEstimate> {
    let estimate = clock::measure(client, link, subject, clock::EXCHANGES).await?;
    let correction = Command::Adjust {
        ns: -estimate.offset_ns,
    };
    match request(client, link, subject, &correction, COMMAND_TIMEOUT).await? {
        Reply::Ok => Ok(estimate),
        other => Err(anyhow!("it answered {other:?} to its clock correction")),
    }
}

/// The longest host name and nonce taken from an announcement.
const MAX_HOST: usize = 255;
const MAX_NONCE: usize = 64;

/// Why an announcement is not one to recruit, if it is not: an id that is
/// not one subject token of 1 to 64 characters (it becomes the worker's
/// subject and a name in the results), a host name too long or with
/// control characters (printed to the terminal), an oversized nonce.
pub fn check_announce(a: &Announce) -> Result<(), String> {
    crate::worker::protocol::check_name("worker id", &a.id).map_err(|e| e.0)?;
    if a.host.len() > MAX_HOST || a.host.chars().any(char::is_control) {
        return Err(format!(
            "worker {} announced a host name of {} bytes or with control characters; at most {MAX_HOST} printable",
            a.id,
            a.host.len()
        ));
    }
    if a.nonce.is_empty() || a.nonce.len() > MAX_NONCE {
        return Err(format!("worker {} announced no usable nonce", a.id));
    }
    Ok(())
}

fn us(ns: u64) -> String {
    format!("{:.0}us", ns as f64 / 1_000.0)
}

fn signed_us(ns: i64) -> String {
    format!("{:+.0}us", ns as f64 / 1_000.0)
}
