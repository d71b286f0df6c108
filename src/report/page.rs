//! report.html: the whole run on one self-contained page. Charts are inline
//! SVG and the stylesheet is inline, so the file opens offline, from a CI
//! artifact or an e-mail, and names no URL.
//!
//! Failures come first: the verdict banner and a list of every failed
//! invariant and error sit above everything else, each failed row is red,
//! and each scenario heading carries its own verdict.

use super::charts::axis::format_micros;
use super::charts::safe_stem;
use super::html::{Attrs, Html, Trusted};
use crate::record::ledger::LedgerCounts;
use crate::record::names;
use crate::results::summary::{Summary, VariantReport};
use crate::results::{first_seen, plain};

/// A chart as the page shows it.
pub struct PageChart {
    pub title: String,
    pub caption: String,
    /// The SVG, or why drawing failed: the page says so where the chart
    /// would be.
    pub svg: Result<String, String>,
}

/// Charts per scenario name, in display order.
pub type ChartsByScenario = Vec<(String, Vec<PageChart>)>;

pub const CSS: &str = r#"
body { font-family: "DejaVu Sans", Verdana, Arial, sans-serif; margin: 0 auto; max-width: 1100px; padding: 0 16px 48px; color: #1a1a1a; }
h1 { font-size: 1.6em; margin: 0.4em 0 0.2em; }
h2 { border-bottom: 2px solid #ccc; padding-bottom: 4px; margin-top: 1.8em; }
h3 { margin-top: 1.4em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #d0d0d0; padding: 3px 8px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.warn { background: #fff3cd; }
th { background: #f2f2f2; }
.banner { padding: 14px 18px; margin: 16px 0; border-radius: 4px; font-size: 1.3em; font-weight: bold; }
.verdict-passed { background: #e3f4e8; border: 2px solid #2e7d32; color: #1b5e20; }
.verdict-failed { background: #d32f2f; border: 4px solid #7f0000; color: #fff; font-size: 1.6em; }
.verdict-interrupted, .verdict-incomplete { background: #fff3cd; border: 2px solid #b8860b; color: #5c4400; }
.problems { background: #fdecea; border: 3px solid #d32f2f; padding: 8px 18px; border-radius: 4px; }
.problems h2 { color: #b71c1c; border: none; margin-top: 0.4em; }
tr.fail th { background: #fdecea; color: #8b0000; }
td.fail { background: #d32f2f; color: #fff; font-weight: bold; }
span.fail { color: #b71c1c; font-weight: bold; }
td.pass .mark { color: #1b5e20; }
.evidence { font-size: 0.85em; font-weight: normal; color: inherit; opacity: 0.85; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 3px; font-size: 0.7em; vertical-align: middle; margin-left: 8px; }
.badge.fail { background: #d32f2f; color: #fff; }
.badge.pass { background: #2e7d32; color: #fff; }
.warnings { background: #fff8e1; border-left: 4px solid #b8860b; padding: 4px 12px; }
figure { margin: 1.2em 0; }
figure svg { max-width: 100%; height: auto; border: 1px solid #e0e0e0; }
figcaption { font-size: 0.9em; color: #444; max-width: 960px; }
.chart-failed { border: 2px dashed #b8860b; padding: 12px; background: #fff8e1; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; font-size: 0.85em; }
footer { margin-top: 3em; font-size: 0.8em; color: #666; }
"#;

/// What went wrong in a variant, one line each, for the list at the top.
struct Problem<'a> {
    scenario: &'a str,
    variant: &'a str,
    what: String,
}

fn problems(summary: &Summary) -> Vec<Problem<'_>> {
    let mut out = Vec::new();
    for (s, v) in summary.variants() {
        let error = v.error.iter().map(|e| format!("error: {e}"));
        let failed = v.invariants.iter().filter(|i| !i.passed);
        let failed = failed.map(|i| format!("invariant {} FAILED: {}", i.name, i.detail));
        out.extend(error.chain(failed).map(|what| Problem {
            scenario: &s.name,
            variant: &v.name,
            what,
        }));
    }
    out
}

/// The verdict class and headline for the banner.
fn verdict(summary: &Summary, problems: usize) -> (&'static str, String) {
    let failed = problems > 0 || summary.verdict == "failed" || !summary.passed();
    if failed {
        let mut text = match problems {
            0 => "FAILED".to_string(),
            1 => "FAILED: 1 problem".to_string(),
            n => format!("FAILED: {n} problems"),
        };
        if summary.verdict == "interrupted" {
            text.push_str(" (and interrupted)");
        }
        ("verdict-failed", text)
    } else {
        match summary.verdict.as_str() {
            "passed" => ("verdict-passed", "PASSED: every invariant held".into()),
            "not applicable" => (
                "verdict-incomplete",
                "NOT APPLICABLE: nothing failed, but a variant checked nothing (no check could apply)".into(),
            ),
            "interrupted" => (
                "verdict-interrupted",
                "INTERRUPTED: the results cover what ran before the interruption".into(),
            ),
            "running" => (
                "verdict-incomplete",
                "INCOMPLETE: the run did not finish writing its results".into(),
            ),
            other => ("verdict-incomplete", format!("verdict: {other}")),
        }
    }
}

fn scenario_id(name: &str) -> String {
    format!("scenario-{}", safe_stem(name))
}

/// The whole page.
pub fn render(summary: &Summary, charts: &ChartsByScenario, generated_by: &str) -> String {
    let problems = problems(summary);
    let (class, headline) = verdict(summary, problems.len());
    let profile = &summary.run.profile.name;

    let title = format!("jsbench {profile}: {headline}");
    let viewport: Attrs = &[
        ("name", "viewport"),
        ("content", "width=device-width, initial-scale=1"),
    ];
    Html::page(&title, &[viewport], CSS, |h| {
        h.el("header", &[], |h| {
            h.text_el("h1", &[], &format!("jsbench results: {profile}"));
            h.text_el("p", &[], &summary.run.profile.description);
            h.text_el(
                "div",
                &[("class", &format!("banner {class}")), ("id", "verdict")],
                &headline,
            );
        });
        if !problems.is_empty() {
            problem_list(h, &problems);
        }
        contents(h, summary);
        run_section(h, summary);
        for scenario in &summary.scenarios {
            let drawn = charts.iter().find(|(name, _)| *name == scenario.name);
            scenario_section(h, scenario, drawn.map_or(&[], |(_, c)| c));
        }
        h.el("footer", &[], |h| {
            h.text(&format!(
                "Rendered by {generated_by} from summary.json and histograms/ of {}.",
                summary.run.id
            ));
        });
    })
}

fn problem_list(h: &mut Html, problems: &[Problem]) {
    h.el(
        "section",
        &[("class", "problems"), ("id", "problems")],
        |h| {
            h.text_el("h2", &[], "What failed");
            h.el("ul", &[], |h| {
                for p in problems {
                    h.el("li", &[], |h| {
                        let href = format!("#{}", scenario_id(p.scenario));
                        h.text_el(
                            "a",
                            &[("href", &href)],
                            &format!("{} / {}", p.scenario, p.variant),
                        );
                        h.text(": ");
                        h.text_el("span", &[("class", "fail")], &p.what);
                    });
                }
            });
        },
    );
}

fn contents(h: &mut Html, summary: &Summary) {
    h.el("nav", &[], |h| {
        h.el("ul", &[], |h| {
            h.el("li", &[], |h| {
                h.text_el("a", &[("href", "#run")], "Run");
            });
            for s in &summary.scenarios {
                h.el("li", &[], |h| {
                    let href = format!("#{}", scenario_id(&s.name));
                    h.text_el("a", &[("href", &href)], &format!("{} ({})", s.name, s.kind));
                    let failed = s.variants.iter().any(|v| !v.passed);
                    if failed {
                        h.text_el("span", &[("class", "badge fail")], "FAILED");
                    }
                });
            }
        });
    });
}

fn run_section(h: &mut Html, summary: &Summary) {
    let run = &summary.run;
    let tool = &run.tool;
    let server = &run.server;
    let host = &run.host;
    let commit = match &tool.git_commit {
        Some(c) if tool.git_dirty => format!("{c} (uncommitted changes)"),
        Some(c) => c.clone(),
        None => "unknown (built outside git)".into(),
    };
    let mut rows: Vec<(&str, String)> = vec![
        ("run", run.id.clone()),
        ("started", run.started_at.clone()),
        (
            "finished",
            run.finished_at
                .clone()
                .unwrap_or_else(|| "not finished".into()),
        ),
        ("verdict", summary.verdict.clone()),
        ("jsbench", format!("{} {}", tool.name, tool.version)),
        ("commit", commit),
        (
            "server",
            format!(
                "nats-server {} ({}), {}",
                server.version, server.mode, server.urls
            ),
        ),
        ("server name", server.server_name.clone()),
    ];
    rows.extend(server.cluster.clone().map(|c| ("cluster", c)));
    rows.extend(
        server
            .jetstream_domain
            .clone()
            .map(|d| ("JetStream domain", d)),
    );
    rows.push((
        "streams",
        format!("{} storage, {} replica(s)", server.storage, server.replicas),
    ));
    rows.push((
        "host",
        format!(
            "{} {}, {} cores{}{}",
            host.os,
            host.arch,
            host.cores,
            host.memory_bytes
                .map(|b| format!(", {:.1} GiB memory", b as f64 / (1u64 << 30) as f64))
                .unwrap_or_default(),
            host.cpu_model
                .as_ref()
                .map(|m| format!(", {m}"))
                .unwrap_or_default()
        ),
    ));
    rows.extend(host.hostname.clone().map(|name| ("host name", name)));
    rows.push((
        "profile",
        format!("{} ({})", run.profile.name, run.profile.source),
    ));
    if !run.kept_streams.is_empty() {
        rows.push(("streams left behind", run.kept_streams.join(", ")));
    }
    // Workers of a distributed run: where the load came from, and how
    // well their clocks were known (latencies between processes carry it).
    for w in &run.workers {
        let residual = match (w.residual_offset_us, w.residual_uncertainty_us) {
            (Some(o), Some(u)) => format!("; after the run {o:+.0} ± {u:.0} µs"),
            _ => String::new(),
        };
        rows.push((
            "worker",
            format!(
                "{} on {} (pid {}, {} cores), {}: clock offset {:+.0} ± {:.0} µs (RTT {:.0} µs), corrected{residual}{}",
                w.id,
                w.host,
                w.pid,
                w.cores,
                w.status,
                w.clock_offset_us,
                w.clock_uncertainty_us,
                w.clock_rtt_us,
                w.detail.as_ref().map(|d| format!("; {d}")).unwrap_or_default(),
            ),
        ));
    }

    h.el("section", &[("id", "run")], |h| {
        h.text_el("h2", &[], "Run");
        h.el("table", &[], |h| {
            for (k, v) in &rows {
                h.el("tr", &[], |h| {
                    h.text_el("th", &[], k);
                    h.text_el("td", &[], v);
                });
            }
        });
        warnings(h, "Server log warnings and errors", &server.log_problems);
        h.el("details", &[], |h| {
            h.text_el("summary", &[], "Profile as run");
            h.text_el("pre", &[], &run.profile.text);
        });
    });
}

fn scenario_section(
    h: &mut Html,
    scenario: &crate::results::summary::ScenarioReport,
    charts: &[PageChart],
) {
    let id = scenario_id(&scenario.name);
    let variants = &scenario.variants;
    let failed = variants.iter().any(|v| !v.passed);
    h.el("section", &[("id", &id)], |h| {
        h.el("h2", &[], |h| {
            h.text(&format!("Scenario {} ({})", scenario.name, scenario.kind));
            let (class, badge) = if failed {
                ("badge fail", "FAILED")
            } else {
                ("badge pass", "passed")
            };
            h.text_el("span", &[("class", class)], badge);
        });
        verdicts(h, variants);
        let notes = variants
            .iter()
            .flat_map(|v| v.warnings.iter().map(move |w| format!("{}: {w}", v.name)));
        warnings(h, "Warnings", &notes.collect::<Vec<_>>());
        h.text_el("h3", &[], "Charts");
        if charts.is_empty() {
            h.text_el(
                "p",
                &[],
                "No chart applies to the data this scenario recorded.",
            );
        }
        for chart in charts {
            let title = &chart.title;
            match &chart.svg {
                Ok(svg) => {
                    h.el("figure", &[("aria-label", title)], |h| {
                        h.trusted(&Trusted::inline_svg(svg));
                        h.text_el("figcaption", &[], &chart.caption);
                    });
                }
                Err(error) => {
                    let text = format!("Chart \"{title}\" could not be drawn: {error}");
                    h.text_el("div", &[("class", "chart-failed")], &text);
                }
            }
        }
        cpu_table(h, variants);
        metrics_table(h, variants);
        ledger_table(h, variants);
        params_table(h, variants);
    });
}

/// A box of warnings under `title`; nothing when there are none.
fn warnings(h: &mut Html, title: &str, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    h.el("div", &[("class", "warnings")], |h| {
        h.text_el("h3", &[], title);
        h.el("ul", &[], |h| {
            for line in lines {
                h.text_el("li", &[], line);
            }
        });
    });
}

/// Invariants as rows, variants as columns: a sweep of many variants stays
/// one screen tall, and a red cell stands out in its row and column.
fn verdicts(h: &mut Html, variants: &[VariantReport]) {
    let invariants = variants.iter().flat_map(|v| &v.invariants);
    let names = first_seen(invariants.clone().map(|i| i.name.as_str()));
    let heads = ("Invariants", "invariants", "invariant");
    variant_table(h, heads, variants, |h| {
        if variants.iter().any(|v| v.error.is_some()) {
            row(
                h,
                &[("class", "fail")],
                "variant completed",
                variants,
                |h, v| match &v.error {
                    Some(e) => verdict_cell(h, false, "✗ ERROR", e),
                    None => verdict_cell(h, true, "✓ yes", ""),
                },
            );
        }
        for name in names {
            let failed = invariants.clone().any(|i| i.name == name && !i.passed);
            let class = if failed { "fail" } else { "pass" };
            row(h, &[("class", class)], name, variants, |h, v| {
                match v.invariants.iter().find(|i| i.name == name) {
                    Some(i) if !i.applicable => {
                        verdict_cell(h, true, "– not applicable", &i.detail)
                    }
                    Some(i) if i.passed && i.client_side => {
                        verdict_cell(h, true, "✓ held (client-side)", &i.detail)
                    }
                    Some(i) if i.passed => verdict_cell(h, true, "✓ held", &i.detail),
                    Some(i) => verdict_cell(h, false, "✗ FAILED", &i.detail),
                    None => {
                        h.text_el("td", &[], "–");
                    }
                }
            });
        }
    });
}

fn verdict_cell(h: &mut Html, passed: bool, mark: &str, evidence: &str) {
    let class = if passed { "pass" } else { "fail" };
    h.el("td", &[("class", class)], |h| {
        h.text_el("span", &[("class", "mark")], mark);
        if !evidence.is_empty() {
            h.text_el("div", &[("class", "evidence")], evidence);
        }
    });
}

/// Every table of a scenario: under the heading `title`, a table of
/// `class` with a column per variant after the rows' own headers (headed
/// `first`), holding the rows `body` writes with [`row`].
fn variant_table(
    h: &mut Html,
    (title, class, first): (&str, &str, &str),
    variants: &[VariantReport],
    body: impl FnOnce(&mut Html),
) {
    h.text_el("h3", &[], title);
    h.el("table", &[("class", class)], |h| {
        let names = variants.iter().map(|v| v.name.as_str());
        h.row("th", std::iter::once(first).chain(names));
        body(h);
    });
}

/// A row with `attrs` headed `th`, then `cell` of each of `cells` (a
/// variant, or what was worked out of one).
fn row<T>(
    h: &mut Html,
    attrs: Attrs,
    th: &str,
    cells: impl IntoIterator<Item = T>,
    mut cell: impl FnMut(&mut Html, T),
) {
    h.el("tr", attrs, |h| {
        h.text_el("th", &[], th);
        for c in cells {
            cell(h, c);
        }
    });
}

/// A cell holding a number.
const NUM: Attrs = &[("class", "num")];

fn metrics_table(h: &mut Html, variants: &[VariantReport]) {
    // Metric names in first-seen order across variants, each with the
    // unit it is first seen with.
    let all = variants.iter().flat_map(|v| &v.metrics);
    let names = first_seen(all.clone().map(|m| m.name.as_str()));
    if names.is_empty() {
        return;
    }
    let repeated = all
        .clone()
        .map(|m| m.repetitions.len())
        .max()
        .filter(|&n| n > 1);
    let title = match repeated {
        Some(n) => format!("Metrics: medians of {n} repetitions, with their min..max range"),
        None => "Metrics".to_string(),
    };
    variant_table(h, (&title, "metrics", "metric"), variants, |h| {
        for name in names {
            let unit = all.clone().find(|m| m.name == name).map_or("", |m| &m.unit);
            row(h, &[], &format!("{name} ({unit})"), variants, |h, v| {
                let cell = v.metric(name).map(|m| {
                    let range = m.spread.filter(|_| m.repetitions.len() > 1);
                    format_with_range(m.value, range.map(|s| (s.min, s.max)), &m.unit)
                });
                h.text_el("td", NUM, cell.as_deref().unwrap_or("–"));
            });
        }
    });
}

/// Who paid for a message: the client's CPU per message (publishers and
/// consumers apart) beside the server's, and the client's share of the
/// two. A share above one half means the load generator worked harder
/// than the server it measured.
fn cpu_table(h: &mut Html, variants: &[VariantReport]) {
    const ROWS: [(&str, &str); 5] = [
        ("client share of a message's CPU", names::CLIENT_CPU_SHARE),
        ("client, whole process (µs/msg)", names::CLIENT_CPU_PER_MSG),
        ("of which publishers (µs/msg)", names::PUBLISHER_CPU_PER_MSG),
        ("of which consumers (µs/msg)", names::CONSUMER_CPU_PER_MSG),
        ("server (µs/msg)", names::SERVER_CPU_PER_MSG),
    ];
    if !variants
        .iter()
        .any(|v| v.metric(names::CLIENT_CPU_SHARE).is_some())
    {
        return;
    }
    let heads = ("CPU per message: client and server", "metrics cpu", "CPU");
    variant_table(h, heads, variants, |h| {
        for (label, name) in ROWS {
            row(h, &[], label, variants, |h, v| {
                let (class, cell) = match v.metric(name).map(|m| m.value) {
                    None => ("num", "–".into()),
                    Some(share) if name == names::CLIENT_CPU_SHARE => {
                        let class = if share > 0.5 { "num warn" } else { "num" };
                        (class, format!("{:.0}%", share * 100.0))
                    }
                    Some(us) => ("num", format!("{us:.2}")),
                };
                h.text_el("td", &[("class", class)], &cell);
            });
        }
    });
}

fn ledger_table(h: &mut Html, variants: &[VariantReport]) {
    let ledgers: Vec<Vec<(String, serde_json::Value)>> = variants
        .iter()
        .map(|v| fields_in_order(&v.ledger))
        .collect();
    let Some(first) = ledgers.first() else {
        return;
    };
    let heads = ("Ledger: every message accounted for", "ledger", "count");
    variant_table(h, heads, variants, |h| {
        for (key, _) in first {
            row(h, &[], key, &ledgers, |h, l| {
                let value = l.iter().find(|(k, _)| k == key).map(|(_, v)| v);
                h.text_el("td", NUM, &json_text(value));
            });
        }
    });
}

/// The ledger's counts in declaration order (published, persisted,
/// delivered, acked, lost reads as the life of a message; serde_json's map
/// would sort them), without listing them here, so a new ledger count
/// shows up by itself: the map's entries in the order their keys stand in
/// the serialised text (flat numbers, so each `"key":` stands once).
fn fields_in_order(ledger: &LedgerCounts) -> Vec<(String, serde_json::Value)> {
    let text = serde_json::to_string(ledger).unwrap_or_default();
    let Ok(serde_json::Value::Object(map)) = serde_json::from_str(&text) else {
        return Vec::new();
    };
    let mut fields: Vec<(String, serde_json::Value)> = map.into_iter().collect();
    fields.sort_by_key(|(key, _)| text.find(&format!("\"{key}\":")));
    fields
}

fn params_table(h: &mut Html, variants: &[VariantReport]) {
    let keys = first_seen(variants.iter().flat_map(|v| v.params.keys()));
    if keys.is_empty() {
        return;
    }
    variant_table(h, ("Parameters", "params", "parameter"), variants, |h| {
        for key in keys {
            row(h, &[], key, variants, |h, v| {
                h.text_el("td", &[], &json_text(v.params.get(key)));
            });
        }
        row(h, &[], "elapsed", variants, |h, v| {
            h.text_el("td", NUM, &format!("{:.1} s", v.elapsed_s));
        });
    });
}

fn json_text(v: Option<&serde_json::Value>) -> String {
    match v {
        None | Some(serde_json::Value::Null) => "–".into(),
        Some(v) => plain(v),
    }
}

/// A metric value for a table cell: latencies with a fitting unit, large
/// numbers with separators, small ones to three significant digits.
pub fn format_value(value: f64, unit: &str) -> String {
    if !value.is_finite() {
        return value.to_string();
    }
    if unit == "us" {
        return format_micros(value);
    }
    let number = if value.abs() >= 100.0 {
        group_thousands(value.round() as i64)
    } else if value == 0.0 {
        "0".into()
    } else {
        let digits = value.abs().log10().floor() as i32;
        let decimals = (2 - digits).clamp(0, 6) as usize;
        format!("{value:.decimals$}")
    };
    if unit.is_empty() {
        number
    } else {
        format!("{number} {unit}")
    }
}

/// A median with the range of its repetitions, "201 µs (199..230 µs)";
/// the value alone when there is no range or its ends read the same.
pub fn format_with_range(value: f64, range: Option<(f64, f64)>, unit: &str) -> String {
    let text = format_value(value, unit);
    match range {
        Some((min, max)) if format_value(min, unit) != format_value(max, unit) => {
            format!("{text} ({})", format_range(min, max, unit))
        }
        _ => text,
    }
}

/// `min..max` with the unit once when both ends share it ("199..230 µs"),
/// else on both ends ("995 µs..1.13 ms").
pub fn format_range(min: f64, max: f64, unit: &str) -> String {
    let (low, high) = (format_value(min, unit), format_value(max, unit));
    match (low.rsplit_once(' '), high.rsplit_once(' ')) {
        (Some((number, a)), Some((_, b))) if a == b => format!("{number}..{high}"),
        _ => format!("{low}..{high}"),
    }
}

fn group_thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}
