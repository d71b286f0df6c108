//! history.html: one page, offline (inline SVG, no script, no URL it must
//! fetch), a section per machine and profile: the result, the change
//! points, the broken checks, a small chart per metric and the runs with
//! links to their own report.html.

use std::path::Path;

use super::Outcome;
use super::analyse::Analysed;
use super::chart::{self, RunLabel};
use super::load::Record;
use super::series::Group;
use crate::report::html::{Html, Trusted};
use crate::results::metadata::short_commit;

const CSS: &str = "body{font-family:sans-serif;margin:24px;color:#222}\
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #c8c8c8;padding:3px 8px;font-size:13px}\
th{background:#f4f4f4;text-align:left}.grid{display:flex;flex-wrap:wrap;gap:12px}\
figure{margin:0}figcaption{font-size:12px;font-family:monospace;margin-bottom:2px}\
.bad{color:#b00000;font-weight:bold}.good{color:#006b3c}.muted{color:#777}";

/// The page for every group; links to reports are made relative to `out`
/// (the folder history.html is written to) when they point at files.
pub fn render(outcome: &Outcome, records: &[Record], out: &Path) -> String {
    Html::page("jsbench history", &[], CSS, |h| {
        h.text_el("h1", &[], "jsbench history");
        let class = if outcome.exit_code == 0 {
            "good"
        } else {
            "bad"
        };
        h.text_el("p", &[("class", class)], &outcome.headline);
        for note in &outcome.notes {
            h.text_el("p", &[("class", "muted")], note);
        }
        for (group, analysed) in &outcome.groups {
            section(h, group, analysed, records, out);
        }
    })
}

fn section(h: &mut Html, group: &Group, analysed: &[Analysed], records: &[Record], out: &Path) {
    let labels = run_labels(group, records, out);
    h.el("section", &[], |h| {
        h.text_el("h2", &[], &format!("{} on {}", group.profile, group.host));
        h.text_el(
            "p",
            &[],
            &format!(
                "{} runs of {} commits; {} series with a direction, analysed by E-Divisive means",
                group.runs.len(),
                commit_count(group, records),
                analysed.len()
            ),
        );
        changes_table(h, analysed);
        events_table(h, group, &labels);
        h.text_el("h3", &[], "Series");
        h.el("div", &[("class", "grid")], |h| {
            for a in analysed {
                let events: Vec<_> = group
                    .events
                    .iter()
                    .filter(|e| e.touches(&a.series))
                    .collect();
                h.el("figure", &[], |h| {
                    let flag = if a.failed {
                        "  [regression]"
                    } else if a.latest_outside_band() {
                        "  [latest outside noise band]"
                    } else {
                        ""
                    };
                    h.text_el(
                        "figcaption",
                        &[],
                        &format!(
                            "{} ({}, {} is better){flag}",
                            a.series.label(),
                            a.series.unit,
                            direction(a)
                        ),
                    );
                    h.trusted(&Trusted::inline_svg(&chart::svg(a, &labels, &events)));
                });
            }
        });
        runs_table(h, &labels);
    });
}

fn direction(a: &Analysed) -> &'static str {
    match a.series.direction {
        crate::record::metrics::Direction::Higher => "higher",
        crate::record::metrics::Direction::Lower => "lower",
        crate::record::metrics::Direction::None => "neither",
    }
}

fn commit_count(group: &Group, records: &[Record]) -> usize {
    let mut commits: Vec<_> = group.runs.iter().map(|&i| &records[i].commit).collect();
    commits.dedup();
    commits.len()
}

/// A short commit and a hover title per run; its report as a link.
pub fn run_labels(group: &Group, records: &[Record], out: &Path) -> Vec<RunLabel> {
    group
        .runs
        .iter()
        .map(|&i| {
            let r = &records[i];
            let commit = short_commit(r.commit.as_deref(), r.dirty);
            RunLabel {
                title: format!("{commit} {} ({})", r.started_at, r.verdict),
                href: r.report.as_deref().and_then(|p| link(p, out)),
                commit,
            }
        })
        .collect()
}

/// A report's link from the page: an `http(s)://` address as it is, a
/// path on this disk relative to the page, anything else no link. A record
/// or a folder name is not to be trusted with the reader's browser: a
/// `javascript:` address, or a folder named `javascript:alert(1)`, would
/// run when clicked.
fn link(report: &str, out: &Path) -> Option<String> {
    let lower = report.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Some(report.to_string());
    }
    if has_scheme(report) {
        return None;
    }
    let target = Path::new(report);
    let relative = match (std::path::absolute(target), std::path::absolute(out)) {
        (Ok(t), Ok(o)) => relative(&t, &o),
        _ => report.to_string(),
    };
    // A first segment with a colon reads as a scheme: "./" keeps it a path.
    Some(
        if relative.starts_with("../") || relative.starts_with('/') {
            relative
        } else {
            format!("./{relative}")
        },
    )
}

/// Whether `text` starts as a URL with a scheme would (`name:`), which a
/// browser would follow as one.
fn has_scheme(text: &str) -> bool {
    text.split_once(':').is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

fn relative(target: &Path, from: &Path) -> String {
    let t: Vec<_> = target.components().collect();
    let f: Vec<_> = from.components().collect();
    let common = t.iter().zip(&f).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".into(); f.len() - common];
    parts.extend(
        t[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

fn changes_table(h: &mut Html, analysed: &[Analysed]) {
    h.text_el("h3", &[], "Change points");
    let rows = super::table::change_rows(analysed);
    if rows.is_empty() {
        h.text_el("p", &[], "None found.");
        return;
    }
    h.el("table", &[], |h| {
        h.row(
            "th",
            ["series", "commits", "before", "after", "change", "p", ""],
        );
        for row in rows {
            h.el("tr", &[], |h| {
                for (i, cell) in row.iter().enumerate() {
                    let class = if i == 6 && cell.contains("regression") {
                        "bad"
                    } else {
                        ""
                    };
                    h.text_el("td", &[("class", class)], cell);
                }
            });
        }
    });
}

fn events_table(h: &mut Html, group: &Group, labels: &[RunLabel]) {
    if group.events.is_empty() {
        return;
    }
    h.text_el("h3", &[("class", "bad")], "Broken checks");
    h.el("table", &[], |h| {
        h.row("th", ["run", "scenario / variant", "check", "detail"]);
        for e in &group.events {
            let f = &e.failure;
            let at = format!("{}/{}", f.scenario, f.variant);
            h.row("td", [&labels[e.position].commit, &at, &f.check, &f.detail]);
        }
    });
}

fn runs_table(h: &mut Html, labels: &[RunLabel]) {
    h.text_el("h3", &[], "Runs");
    h.el("table", &[], |h| {
        for (i, l) in labels.iter().enumerate() {
            h.el("tr", &[], |h| {
                h.text_el("td", &[], &(i + 1).to_string());
                h.text_el("td", &[], &l.title);
                h.el("td", &[], |h| {
                    match &l.href {
                        Some(href) => h.text_el("a", &[("href", href)], "report.html"),
                        None => h.text_el("span", &[("class", "muted")], "no report"),
                    };
                });
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 51: a record's report or a folder name put any scheme into an
    /// href, `javascript:` among them.
    #[test]
    fn a_report_link_is_http_or_a_path_never_a_script() {
        let out = Path::new("/srv/site");
        for hostile in [
            "javascript://%0aalert(document.domain)",
            "JavaScript:alert(1)",
            "data:text/html,<script>alert(1)</script>",
            "vbscript:msgbox(1)",
        ] {
            assert_eq!(link(hostile, out), None, "{hostile}");
        }
        assert_eq!(
            link("https://ci.example/run/7/report.html", out).as_deref(),
            Some("https://ci.example/run/7/report.html")
        );
        // A folder named like a script, under the page: a path still.
        let folder = link("/srv/site/javascript:alert(1)/report.html", out).unwrap();
        assert_eq!(folder, "./javascript:alert(1)/report.html");
        let up = link("/srv/results/run/report.html", out).unwrap();
        assert_eq!(up, "../results/run/report.html");
    }
}
