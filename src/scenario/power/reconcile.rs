//! The ledger against what the restarted server holds: which PubAcked
//! messages are gone (the server's loss: it confirmed them), what was
//! stored without a PubAck (in flight at the kill: fine, counted), what
//! is stored twice, and the invariants on those counts.

use crate::record::tally::Tally;
use crate::streams::readback::ReadBack;
use crate::variant::Invariant;

/// The stream as the restarted server reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamState {
    pub messages: u64,
    pub first_seq: u64,
    pub last_seq: u64,
}

/// What the restarted server holds of the variant's stream.
#[derive(Debug, Clone, Default)]
pub struct Survey {
    /// `None`: the server came back without the stream.
    pub stream: Option<StreamState>,
    /// Empty (and complete) when the stream is gone.
    pub read: ReadBack,
}

/// The ledger reconciled with the survey, by (publisher, message number):
/// the sequences a restarted stream hands out may repeat lost ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Messages a PubAck confirmed stored.
    pub acked: u64,
    /// Of those, not in the stream after the restart.
    pub lost_after_puback: u64,
    /// Stored without a PubAck: sent before the kill, unanswered.
    pub unacked_stored: u64,
    /// Messages stored more than once.
    pub stored_twice: u64,
    /// Stored messages without a jsbench stamp.
    pub foreign: u64,
}

/// `confirmed[publisher]`: how often a PubAck confirmed each message.
pub fn reconcile(survey: &Survey, confirmed: &[&Tally]) -> Reconciled {
    let rec = survey.read.reconcile(confirmed);
    Reconciled {
        acked: confirmed
            .iter()
            .map(|t| t.values().map(u64::from).sum::<u64>())
            .sum(),
        lost_after_puback: rec.missing,
        unacked_stored: rec.unconfirmed,
        stored_twice: survey.read.stored_twice(),
        foreign: survey.read.malformed,
    }
}

/// Every PubAcked message is in the stream after the restart.
pub const SURVIVED: &str = "every PubAcked message survived the cut";
pub const READ_IN_FULL: &str = "the stream was read back in full";
pub const ONCE: &str = "no message stored twice";
pub const STAMPED: &str = "every stored message was published by the variant";

/// The checks on a reconciliation. `promise` is what the setting promised
/// ([`super::cut::promise`]): where it does not cover the cut, the loss
/// is reported as a finding and its invariant reads "not applicable".
pub fn verify(
    survey: &Survey,
    rec: &Reconciled,
    promise: &Result<&'static str, String>,
) -> Vec<Invariant> {
    let gone = if survey.stream.is_none() {
        ", the stream itself gone"
    } else {
        ""
    };
    let loss = format!(
        "{} of {} PubAcked messages missing after the restart{gone}: lost by the server, \
         which had confirmed them; {} stored without a PubAck",
        rec.lost_after_puback, rec.acked, rec.unacked_stored
    );
    let survived = match promise {
        Ok(promised) => Invariant::check(
            SURVIVED,
            rec.lost_after_puback == 0 && survey.read.complete,
            format!("{promised}: {loss}"),
        ),
        Err(why) => Invariant::not_applicable(
            SURVIVED,
            format!("not applicable: {why}; the finding: {loss}"),
        ),
    };
    vec![
        survived,
        Invariant::check(
            READ_IN_FULL,
            survey.read.complete,
            format!(
                "{} messages read{}",
                survey.read.messages,
                if survey.read.complete {
                    ""
                } else {
                    " before the read stalled"
                }
            ),
        ),
        Invariant::equal(ONCE, rec.stored_twice, 0),
        Invariant::check(
            STAMPED,
            rec.foreign == 0,
            format!("{} stored messages carry no jsbench stamp", rec.foreign),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three messages of one publisher, all acked and all read back.
    fn clean() -> (Survey, Tally) {
        let mut acked = Tally::new();
        for m in 0..3 {
            acked.mark(m);
        }
        let survey = Survey {
            stream: Some(StreamState {
                messages: 3,
                first_seq: 1,
                last_seq: 3,
            }),
            read: ReadBack {
                messages: 3,
                by_origin: vec![vec![1, 1, 1]],
                complete: true,
                ..Default::default()
            },
        };
        (survey, acked)
    }

    fn failing(
        survey: &Survey,
        acked: &Tally,
        promise: Result<&'static str, String>,
    ) -> Vec<String> {
        let rec = reconcile(survey, &[acked]);
        verify(survey, &rec, &promise)
            .into_iter()
            .filter(|i| !i.passed)
            .map(|i| i.name)
            .collect()
    }

    const KEPT: Result<&str, String> = Ok("promised");

    #[test]
    fn a_pub_acked_message_missing_fails_where_promised_and_is_a_finding_where_not() {
        let (survey, acked) = clean();
        assert!(failing(&survey, &acked, KEPT).is_empty());

        let (mut survey, acked) = clean();
        survey.read.by_origin[0][1] = 0;
        assert_eq!(failing(&survey, &acked, KEPT), [SURVIVED]);
        let rec = reconcile(&survey, &[&acked]);
        assert_eq!(rec.lost_after_puback, 1);
        let checks = verify(&survey, &rec, &Err("sync default".into()));
        assert!(checks.iter().all(|i| i.passed), "a finding, not a failure");
        assert_eq!(checks[0].state(), "not applicable");
        assert!(
            checks[0].detail.contains("not applicable: sync default")
                && checks[0]
                    .detail
                    .contains("1 of 3 PubAcked messages missing")
                && checks[0].detail.contains("lost by the server"),
            "{}",
            checks[0].detail
        );

        // The stream gone whole: every acked message lost, and said so.
        let (mut survey, acked) = clean();
        survey.stream = None;
        survey.read = ReadBack {
            complete: true,
            ..Default::default()
        };
        assert_eq!(failing(&survey, &acked, KEPT), [SURVIVED]);
        let rec = reconcile(&survey, &[&acked]);
        assert_eq!(rec.lost_after_puback, 3);
        let checks = verify(&survey, &rec, &KEPT);
        assert!(checks[0].detail.contains("the stream itself gone"));
    }

    #[test]
    fn each_other_check_fails_on_its_own_fault() {
        let (mut survey, acked) = clean();
        survey.read.complete = false;
        assert_eq!(failing(&survey, &acked, KEPT), [SURVIVED, READ_IN_FULL]);
        // Where nothing was promised, the stalled read still fails.
        assert_eq!(
            failing(&survey, &acked, Err("nothing".into())),
            [READ_IN_FULL]
        );

        let (mut survey, acked) = clean();
        survey.read.by_origin[0][2] = 2;
        assert_eq!(failing(&survey, &acked, KEPT), [ONCE]);

        let (mut survey, acked) = clean();
        survey.read.malformed = 1;
        assert_eq!(failing(&survey, &acked, KEPT), [STAMPED]);

        // Stored without a PubAck (in flight at the kill): counted, fine.
        let (mut survey, acked) = clean();
        survey.read.by_origin[0].push(1);
        assert!(failing(&survey, &acked, KEPT).is_empty());
        assert_eq!(reconcile(&survey, &[&acked]).unacked_stored, 1);
    }
}
