//! `jsbench ab-side`: one side of `jsbench ab`, kept warm. The run's
//! session (server, control connection, account) and one context per
//! profile are set up once; then each line on stdin runs one scenario
//! once, exactly as `run` would, and is answered by one line on stdout.
//! The protocol is [`crate::ab::window`]'s.

use std::io::Write;

use anyhow::{Context, Result, anyhow};
use tokio_util::sync::CancellationToken;

use super::{RunOptions, RunOutcome, Session, start_target, validate};
use crate::ab::window::{PROTOCOL, Ready, Reply, Request, TurnReply};
use crate::connect::ConnectionRequest;
use crate::drive::RunContext;
use crate::profile::ServerPlan;
use crate::report::terminal;
use crate::results::Collected;
use crate::scenario::Profile;
use crate::streams::provision::{Names, SizedMaxBytes};

#[derive(Debug, Clone)]
pub struct SideOptions {
    /// Bundled profile names or paths to TOML files.
    pub profiles: Vec<String>,
    /// Connection flags and environment, as `run` takes them.
    pub connection: ConnectionRequest,
    /// Monitoring endpoint of an external server, for server CPU.
    pub monitor: Option<String>,
    /// The external server's processes on this host: server CPU from /proc.
    pub server_pids: Vec<u32>,
}

/// A profile ready for any of its scenarios: its account checked and its
/// context built once, for the life of the process.
struct Warm {
    profile: Profile,
    server_plan: ServerPlan,
    stream_max_bytes: Option<SizedMaxBytes>,
    ctx: RunContext,
}

/// Serves turns until `quit`, the end of stdin or `stop`; the exit status:
/// 0, 1 when the clean-up failed, 130 when interrupted. Bad input fails
/// before the ready line, as `run` would fail it.
pub async fn serve(options: SideOptions, stop: CancellationToken) -> Result<i32> {
    let mut out = Protocol::take_stdout()?;
    // No cluster, no leafnode, no progress bar, the streams deleted.
    let options = RunOptions {
        profiles: options.profiles,
        connection: options.connection,
        monitor: options.monitor,
        server_pids: options.server_pids,
        ..Default::default()
    };
    let (profiles, resolution) = validate(&options)?;
    let (target, _) = start_target(&options, &profiles, &resolution)?;
    let session = Session::open(&options, &stop, &target, None, &resolution).await?;
    let mut warm = Vec::new();
    for profile in profiles {
        warm.push(session.warm(profile)?);
    }
    let scenarios = warm
        .iter()
        .flat_map(|w| {
            w.profile
                .scenarios
                .iter()
                .map(|s| (w.profile.name.clone(), s.name().to_string()))
        })
        .collect();
    out.send(&Reply::Ready(Ready {
        protocol: PROTOCOL,
        version: env!("CARGO_PKG_VERSION").to_string(),
        scenarios,
    }))?;
    let served = serve_requests(&session, &mut warm, &mut out).await;
    let mut failures = Vec::new();
    for w in &warm {
        failures.extend(w.ctx.provisioner.teardown().await);
    }
    for f in &failures {
        eprintln!("warning: clean-up failed: {f}");
    }
    served?;
    let outcome = RunOutcome {
        results: Vec::new(),
        passed: failures.is_empty(),
        // A side's turns are judged by `ab`, not by this status.
        checked_nothing: false,
        inconclusive: false,
        interrupted: stop.is_cancelled(),
    };
    Ok(outcome.exit_code())
}

/// Answers each request in turn until `quit`, the end of stdin, or the
/// stop (after answering the turn it stopped).
async fn serve_requests(
    session: &Session<'_>,
    warm: &mut [Warm],
    out: &mut Protocol,
) -> Result<()> {
    let mut requests = read_stdin();
    loop {
        let line = tokio::select! {
            line = requests.recv() => line,
            _ = session.stop.cancelled() => None,
        };
        let Some(line) = line else {
            return Ok(());
        };
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Request>(&line) {
            Ok(Request::Quit {}) => return Ok(()),
            Ok(Request::Turn { profile, scenario }) => {
                match session.turn(warm, &profile, &scenario).await {
                    Ok(reply) => Reply::Turn(Box::new(reply)),
                    Err(e) => {
                        eprintln!("error: {e:#}");
                        Reply::Error(format!("{e:#}"))
                    }
                }
            }
            Err(e) => Reply::Error(format!(
                "not a request ({e}): {line:?}; a side takes {{\"turn\":{{\"profile\":\"P\",\
                 \"scenario\":\"S\"}}}} or {{\"quit\":{{}}}}, one per line"
            )),
        };
        out.send(&reply)?;
        if session.stop.is_cancelled() {
            return Ok(());
        }
    }
}

/// Stdin's lines, read on a thread of their own: a read blocked on an
/// idle stdin must not hold up the runtime's shutdown.
fn read_stdin() -> tokio::sync::mpsc::Receiver<String> {
    let (send, receive) = tokio::sync::mpsc::channel(4);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if send.blocking_send(line).is_err() {
                break;
            }
        }
    });
    receive
}

/// The lead-in of a warm side's drives (a run's is [`crate::drive::LEAD_IN`]).
const WARM_LEAD_IN: std::time::Duration = std::time::Duration::from_millis(40);

impl Session<'_> {
    /// Checks the profile's account and builds the context every turn of
    /// it runs in.
    fn warm(&self, profile: Profile) -> Result<Warm> {
        let server_plan = self.server_plan(&profile);
        let stream_max_bytes = self.check_account(&profile, &server_plan)?;
        let mut ctx = self.context(server_plan, stream_max_bytes);
        // The side's clients connect before each drive's t0 as a run's
        // do, in a process whose code is already warm: a fifth of a run's
        // lead-in is time enough, and a turn is shorter by the rest.
        ctx.lead_in = WARM_LEAD_IN;
        self.progress.println(&format!(
            "jsbench ab-side: profile {} against nats-server {} (R{}) at {}",
            profile.name,
            self.info.version,
            server_plan.replicas,
            self.connect.describe()
        ));
        Ok(Warm {
            profile,
            server_plan,
            stream_max_bytes,
            ctx,
        })
    }

    /// One scenario once, into a summary of its own: what `run` would
    /// write for a profile holding just that scenario, `repeat = 1`.
    async fn turn(&self, warm: &mut [Warm], profile: &str, scenario: &str) -> Result<TurnReply> {
        let profiles: Vec<&str> = warm.iter().map(|w| w.profile.name.as_str()).collect();
        let profiles = profiles.join(", ");
        let w = warm
            .iter_mut()
            .find(|w| w.profile.name == profile)
            .ok_or_else(|| anyhow!("no profile {profile:?} here; this side runs {profiles}"))?;
        let plan = w
            .profile
            .scenarios
            .iter()
            .find(|s| s.name() == scenario)
            .ok_or_else(|| {
                let names: Vec<&str> = w.profile.scenarios.iter().map(|s| s.name()).collect();
                anyhow!(
                    "profile {profile} has no scenario {scenario:?}; it has {}",
                    names.join(", ")
                )
            })?;
        // Fresh stream names: a stream a failed variant could not delete
        // must not make the next turn's creation fail.
        w.ctx.names = Names::generate();
        let mut metadata = self.metadata(&w.profile, &w.server_plan, w.stream_max_bytes);
        metadata.repeat = 1;
        let mut collected = Collected::new(metadata);
        self.run_scenario(plan, plan.name(), &mut w.ctx, &mut collected)
            .await
            .with_context(|| format!("turn {profile}/{scenario}"))?;
        self.finish(collected.summary_mut(), &w.ctx, true, false);
        eprintln!("{}", terminal::render(collected.summary()));
        let (summary, histograms) = collected.into_parts();
        Ok(TurnReply {
            summary,
            histograms,
        })
    }
}

/// The protocol's channel: the process's stdout, taken at the start so
/// that anything else printed lands on stderr and cannot break a line ab
/// reads.
struct Protocol(std::fs::File);

impl Protocol {
    fn take_stdout() -> Result<Protocol> {
        use std::os::fd::{FromRawFd, OwnedFd};
        std::io::stdout().flush().context("flushing stdout")?;
        // SAFETY: fcntl duplicates a descriptor this process holds open;
        // the duplicate is new and owned by nothing else (close-on-exec,
        // so servers and workers started later do not inherit it).
        let fd = unsafe { libc::fcntl(libc::STDOUT_FILENO, libc::F_DUPFD_CLOEXEC, 3) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error()).context("duplicating stdout");
        }
        // SAFETY: `fd` was just opened above and is owned here alone.
        let protocol = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: dup2 between two standard descriptors this process holds.
        if unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) } < 0 {
            return Err(std::io::Error::last_os_error()).context("sending stdout to stderr");
        }
        Ok(Protocol(std::fs::File::from(protocol)))
    }

    fn send(&mut self, reply: &Reply) -> Result<()> {
        let mut line = serde_json::to_vec(reply).context("serialising a reply")?;
        line.push(b'\n');
        self.0
            .write_all(&line)
            .and_then(|()| self.0.flush())
            .context("writing to ab (stdout)")
    }
}
