//! `rates = "search"` on the embedded server: probes chosen by the
//! search, each kept as a variant, and a `search` variant with the answer
//! and what limited it. Where the knee falls depends on the machine, so
//! these pin the two ends the search must get right on any machine; the
//! bracket-and-bisect order is unit-tested in src/scenario/search.rs.

mod common;

use jsbench::results::summary::{Summary, VariantReport};

fn body(slo: &str) -> String {
    format!(
        "[[scenario]]\nkind = \"latency\"\nduration = \"1s\"\nrates = \"search\"\n\
         slo = {slo}\nsearch = {{ min = 500, max = 2000, precision = \"25%\" }}\n"
    )
}

fn search_variant(summary: &Summary) -> &VariantReport {
    summary
        .variants()
        .map(|(_, v)| v)
        .find(|v| v.name == "search")
        .expect("a search variant")
}

fn names(summary: &Summary) -> Vec<&str> {
    summary.variants().map(|(_, v)| v.name.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_whose_top_holds_doubles_to_it_confirms_it_and_says_so() {
    let server = common::server();
    let summary = common::run_profile(&server, "search", &body("{ p99 = \"2s\" }")).await;
    common::assert_all_passed(&summary);
    assert_eq!(
        names(&summary),
        [
            "rate-500",
            "rate-1000",
            "rate-2000",
            "rate-2000-again",
            "search"
        ]
    );
    let v = search_variant(&summary);
    assert_eq!(common::metric(v, "max_sustainable_rate"), 2000.0);
    assert_eq!(v.params["limited_by"], "search_max");
    assert_eq!(v.params["slo"], "p99 <= 2s on e2e_latency");
    // Every probe says how it was judged, beside its latency curve.
    let (_, probe) = summary.variants().next().unwrap();
    let verdict = probe.params["search_verdict"].as_str().unwrap();
    assert!(verdict.starts_with("held ("), "{verdict}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_whose_lowest_rate_fails_reports_no_rate_and_why() {
    let server = common::server();
    // No delivery takes under a microsecond: the lowest rate fails the SLO.
    let summary = common::run_profile(
        &server,
        "search",
        &body("{ p50 = \"1us\", on = \"pub_ack\" }"),
    )
    .await;
    assert_eq!(names(&summary), ["rate-500", "search"]);
    let v = search_variant(&summary);
    assert!(v.metric("max_sustainable_rate").is_none());
    let error = v.error.as_deref().unwrap();
    assert!(
        error.contains("no rate in 500..2000 msg/s holds p50 <= 1us on pub_ack_latency")
            && error.contains("pub_ack_latency ="),
        "{error}"
    );
    assert_eq!(summary.verdict, "failed");
}
