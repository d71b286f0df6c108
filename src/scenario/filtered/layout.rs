//! Subject filters as the server applies them, computed on this side: a
//! filtered consumer's deliveries are checked against the set a filter
//! selects, so jsbench needs its own answer to "does this subject match"
//! and "which stored messages does this filter set select" (`due`),
//! independent of the server it checks.
//!
//! A fill publishes message *m* (from 0) to the subject of its [`Layout`]
//! at *m*; one publisher on one connection, nothing retried, stores it at
//! stream sequence *m* + 1, so the layout names every sequence's subject
//! without reading the stream back.

use super::plan::Shape;
use crate::record::ledger::SeqSet;

/// Whether `subject` matches `filter` under NATS rules: tokens split on
/// `.`, `*` matches exactly one token, `>` as the last token matches one
/// or more.
pub fn matches(filter: &str, subject: &str) -> bool {
    let mut f = filter.split('.');
    let mut s = subject.split('.');
    loop {
        match (f.next(), s.next()) {
            (Some(">"), Some(_)) => return f.next().is_none(),
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// How a fill spreads its messages over subjects: `cardinality` data
/// subjects `<base>.d.<k>` taken in turn, and with `rare_every` one message
/// in that many on `<base>.rare` instead (a literal filter's rare subject).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub base: String,
    pub cardinality: u32,
    /// 0: no rare subject.
    pub rare_every: u64,
}

impl Layout {
    pub fn rare_subject(&self) -> String {
        format!("{}.rare", self.base)
    }

    /// Subject ids: data subjects 0..cardinality, then the rare one.
    fn subject_count(&self) -> usize {
        self.cardinality as usize + usize::from(self.rare_every > 0)
    }

    pub fn subject_name(&self, id: u32) -> String {
        if id == self.cardinality {
            self.rare_subject()
        } else {
            format!("{}.d.{id}", self.base)
        }
    }

    /// Messages after which the layout repeats: whole rare blocks that
    /// visit every data subject at least once.
    pub fn period(&self) -> u64 {
        let c = u64::from(self.cardinality.max(1));
        match self.rare_every {
            0 => c,
            n => n * c.div_ceil(n.saturating_sub(1).max(1)),
        }
    }

    /// The subject id of message `m`.
    pub fn subject_of(&self, m: u64) -> u32 {
        let j = m % self.period();
        let c = u64::from(self.cardinality.max(1));
        match self.rare_every {
            0 => (j % c) as u32,
            n if j.is_multiple_of(n) => self.cardinality,
            n => ((j - j / n - 1) % c) as u32,
        }
    }

    /// The filter subjects of `shape` over this layout; empty for none.
    pub fn filters(&self, shape: Shape) -> Vec<String> {
        // The subject every data subject sits under, one token deeper.
        let data = format!("{}.d", self.base);
        match shape {
            Shape::None => Vec::new(),
            Shape::Literal => vec![self.rare_subject()],
            Shape::Star => vec![format!("{data}.*")],
            Shape::Tail => vec![format!("{data}.>")],
            Shape::All => vec![format!("{}.>", self.base)],
            Shape::Several => vec![format!("{data}.*"), self.rare_subject()],
        }
    }

    /// The publish cycle a fill goes round by message number, one period.
    pub fn subjects(&self) -> Vec<String> {
        (0..self.period())
            .map(|m| self.subject_name(self.subject_of(m)))
            .collect()
    }
}

/// The sequences a stream keeps of `messages` laid out by `layout`, with
/// `max_per_subject` (0: no limit) keeping each subject's newest only.
pub fn stored(layout: &Layout, messages: u64, max_per_subject: u64) -> SeqSet {
    let mut newer = vec![0u64; layout.subject_count()];
    let kept = (0..messages).rev().filter(|&m| {
        let newer = &mut newer[layout.subject_of(m) as usize];
        *newer += 1;
        max_per_subject == 0 || *newer <= max_per_subject
    });
    kept.map(|m| m + 1).collect()
}

/// The stored sequences a consumer with `filters` must deliver: all of
/// them without a filter, else those whose subject matches any entry.
pub fn due(layout: &Layout, stored: &SeqSet, filters: &[String]) -> SeqSet {
    let selected: Vec<bool> = (0..layout.subject_count() as u32)
        .map(|id| {
            let name = layout.subject_name(id);
            filters.is_empty() || filters.iter().any(|f| matches(f, &name))
        })
        .collect();
    let due = stored
        .iter()
        .filter(|seq| selected[layout.subject_of(seq - 1) as usize]);
    due.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_match_as_the_server_matches_them() {
        assert!(matches("a.b", "a.b"));
        assert!(!matches("a.b", "a.c"));
        assert!(!matches("a.b", "a.b.c"));
        assert!(!matches("a.b.c", "a.b"));
        assert!(matches("a.*", "a.b"));
        assert!(!matches("a.*", "a.b.c"));
        assert!(matches("a.*.c", "a.b.c"));
        assert!(matches("a.>", "a.b"));
        assert!(matches("a.>", "a.b.c"));
        assert!(!matches("a.>", "a"), "> needs at least one token");
        assert!(!matches("a.>.c", "a.b.c"), "> only as the last token");
        assert!(matches(">", "x.y"));
        assert!(!matches("a.*", "b.c"));
    }

    fn layout(cardinality: u32, rare_every: u64) -> Layout {
        Layout {
            base: "jsb.t".into(),
            cardinality,
            rare_every,
        }
    }

    #[test]
    fn the_rare_subject_gets_one_message_in_rare_every_and_data_subjects_take_turns() {
        let l = layout(3, 4);
        let ids: Vec<u32> = (0..12).map(|m| l.subject_of(m)).collect();
        assert_eq!(ids, [3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2]);
        let l = layout(5, 3);
        // Two data slots a block: the five data subjects need three blocks.
        assert_eq!(l.period(), 9);
        let ids: Vec<u32> = (0..9).map(|m| l.subject_of(m)).collect();
        assert_eq!(ids, [5, 0, 1, 5, 2, 3, 5, 4, 0]);
        assert_eq!(l.subjects()[0], "jsb.t.rare");
        assert_eq!(l.subjects()[1], "jsb.t.d.0");
        let plain = layout(4, 0);
        assert_eq!(plain.period(), 4);
        assert_eq!(plain.subject_of(6), 2);
    }

    #[test]
    fn one_subject_with_a_rare_one_repeats_every_rare_every() {
        let l = layout(1, 1000);
        assert_eq!(l.period(), 1000);
        let rare = (0..10_000).filter(|&m| l.subject_of(m) == 1).count();
        assert_eq!(rare, 10);
    }

    #[test]
    fn each_shape_selects_what_its_doc_says() {
        let layout = layout(10, 10);
        let stored = stored(&layout, 1000, 0);
        let share = |s| due(&layout, &stored, &layout.filters(s)).len();
        assert_eq!(share(Shape::None), 1000);
        assert_eq!(share(Shape::Literal), 100);
        assert_eq!(share(Shape::Star), 900);
        assert_eq!(share(Shape::Tail), 900);
        assert_eq!(share(Shape::All), 1000);
        assert_eq!(share(Shape::Several), 1000);
        assert_eq!(layout.filters(Shape::Several), ["jsb.t.d.*", "jsb.t.rare"]);
    }

    #[test]
    fn max_per_subject_keeps_each_subjects_newest() {
        let l = layout(2, 0);
        // Messages 0..6 go to 0,1,0,1,0,1: two each kept are the last four.
        let kept = stored(&l, 6, 2);
        assert_eq!(kept.iter().collect::<Vec<_>>(), [3, 4, 5, 6]);
        assert_eq!(stored(&l, 6, 0).len(), 6);
    }

    #[test]
    fn due_is_the_stored_messages_a_filter_set_selects() {
        let l = layout(3, 4);
        let all = stored(&l, 12, 0);
        let f = |s: &[&str]| -> Vec<String> { s.iter().map(|x| x.to_string()).collect() };
        assert_eq!(due(&l, &all, &[]).len(), 12);
        assert_eq!(
            due(&l, &all, &f(&["jsb.t.rare"]))
                .iter()
                .collect::<Vec<_>>(),
            [1, 5, 9]
        );
        assert_eq!(due(&l, &all, &f(&["jsb.t.d.*"])).len(), 9);
        assert_eq!(due(&l, &all, &f(&["jsb.t.d.>"])).len(), 9);
        assert_eq!(due(&l, &all, &f(&["jsb.t.>"])).len(), 12);
        assert_eq!(due(&l, &all, &f(&["jsb.t.d.*", "jsb.t.rare"])).len(), 12);
        assert_eq!(due(&l, &all, &f(&["jsb.t.d.1"])).len(), 3);
        let newest = stored(&l, 12, 1);
        assert_eq!(
            due(&l, &newest, &f(&["jsb.t.rare"]))
                .iter()
                .collect::<Vec<_>>(),
            [9]
        );
    }
}
