//! The change points as rows of text, shared by history.html's table and
//! history.md's: one wording for both.

use super::analyse::Analysed;
use crate::report::page::format_value;
use crate::results::metadata::short_commit;

/// A row per change point, newest first: series, commit range, medians
/// before and after, change, p-value, and what it means.
pub fn change_rows(analysed: &[Analysed]) -> Vec<Vec<String>> {
    let mut rows: Vec<(usize, Vec<String>)> = Vec::new();
    for a in analysed {
        let newest = a.changes.len().saturating_sub(1);
        for (i, c) in a.changes.iter().enumerate() {
            let meaning = match (c.regression, a.failed && i == newest) {
                (true, true) => "regression (fails)",
                (true, false) => "regression",
                (false, _) => "improvement",
            };
            let unit = &a.series.unit;
            rows.push((
                c.position,
                vec![
                    a.series.label(),
                    format!(
                        "{}..{}",
                        short_commit(c.before_commit.as_deref(), false),
                        short_commit(c.after_commit.as_deref(), false)
                    ),
                    format_value(c.before, unit),
                    format_value(c.after, unit),
                    format!("{:+.1}%", c.change * 100.0),
                    format!("{:.3}", c.p_value),
                    meaning.to_string(),
                ],
            ));
        }
    }
    rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1[0].cmp(&b.1[0])));
    rows.into_iter().map(|r| r.1).collect()
}
