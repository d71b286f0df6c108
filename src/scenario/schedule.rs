//! Whether a paced generator kept its schedule, judged the same way by
//! every scenario that paces (latency, publish, fan-out) and read by the
//! rate search. A single late message does not decide it: one stall of
//! the sending thread (a page fault, a context switch on a busy host)
//! delays the messages queued behind it and nothing else, while a
//! generator that cannot keep up falls further behind with every message,
//! so one in a hundred sent late is the signal.

use std::time::Duration;

use crate::drive::DriveOutcome;

/// How a warning saying the generator fell behind begins; the search
/// reads it as a failed probe.
pub const FELL_BEHIND: &str = "the load generator fell behind";

/// Send lag (intended time to the send) that one message in a hundred may
/// exceed before the generator counts as behind.
pub const LAG_P99_LIMIT: Duration = Duration::from_millis(10);

/// The rate a generator must reach, as a share of its target.
pub const RATE_SHARE: f64 = 0.97;

/// Why the generator of `o` did not keep the schedule of `target` msg/s,
/// or `None` when it did: it reached under 97% of the target, or its send
/// lag p99 exceeded 10 ms. An interrupted variant is not judged.
pub fn fell_behind(o: &DriveOutcome, target: f64) -> Option<String> {
    if o.interrupted {
        return None;
    }
    let achieved = o.publish_rate();
    let lag_p99 = Duration::from_nanos(o.send_lag.quantile(0.99));
    let late = o.final_lag();
    judge(achieved, target, lag_p99).then(|| {
        format!(
            "{FELL_BEHIND}: achieved {achieved:.0} of {target:.0} msg/s, send lag p99 {:.1} ms \
             (last message {:.1} ms late); latency from the intended send includes that delay",
            lag_p99.as_secs_f64() * 1e3,
            late.as_secs_f64() * 1e3
        )
    })
}

/// Behind when the rate falls short or the send lag's p99 is over its limit.
fn judge(achieved: f64, target: f64, lag_p99: Duration) -> bool {
    achieved < RATE_SHARE * target || lag_p99 > LAG_P99_LIMIT
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::histogram::Recorder;

    #[test]
    fn one_stall_at_the_end_is_not_falling_behind_but_a_growing_lag_is() {
        // 10,000 messages at 2,000 msg/s: on time but for the last 24,
        // held up by one 12 ms stall (the old rule judged the last alone).
        let mut lag = Recorder::new();
        for i in 0..10_000u64 {
            let late = if i >= 9_976 { 12_000_000 } else { 50_000 };
            lag.record(late);
        }
        let p99 = Duration::from_nanos(lag.quantile(0.99));
        assert!(!judge(2_000.0, 2_000.0, p99), "p99 {p99:?}");

        // A generator that cannot keep up: the lag grows with every
        // message, and the last fifth are more than 10 ms late.
        let mut lag = Recorder::new();
        for i in 0..10_000u64 {
            lag.record(i * 8_000);
        }
        let p99 = Duration::from_nanos(lag.quantile(0.99));
        assert!(judge(1_990.0, 2_000.0, p99), "p99 {p99:?}");
        // And one that reaches 96% of its target, however punctual.
        assert!(judge(1_920.0, 2_000.0, Duration::ZERO));
    }
}
