//! The ack scenario against a real server: every ack mode by consume and by
//! fetch reads the whole pre-filled stream, nothing lost or redelivered;
//! the consume references read it too, and are held to reading it all.

mod common;

use common::{assert_all_passed, metric, run_profile};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ack_mode_reads_everything_and_double_ack_is_timed() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "acks",
        "[[scenario]]\nkind = \"ack\"\nmessages = 2000\nreads = [\"pull\", \"fetch\"]\n\
         [scenario.consumer]\nack_every = 50\nbatch = 100\n",
    )
    .await;
    assert_all_passed(&summary);
    let names: Vec<&str> = summary.variants().map(|(_, v)| v.name.as_str()).collect();
    // The modes in the listed order, then in reverse: each mode's mean
    // run sits at the same place, so no mode has the coldest caches alone.
    assert_eq!(
        names,
        [
            "consume.none",
            "consume.all",
            "consume.explicit",
            "consume.double",
            "consume.double.reversed",
            "consume.explicit.reversed",
            "consume.all.reversed",
            "consume.none.reversed",
            "fetch.none",
            "fetch.all",
            "fetch.explicit",
            "fetch.double",
            "fetch.double.reversed",
            "fetch.explicit.reversed",
            "fetch.all.reversed",
            "fetch.none.reversed",
        ]
    );
    for (_, v) in summary.variants() {
        assert_eq!(v.ledger.delivered, 2000, "{}", v.name);
        assert_eq!(v.ledger.redelivered, 0, "{}", v.name);
        assert!(metric(v, "consume_rate") > 0.0);
        let double = v.name.contains("double");
        assert_eq!(
            v.metric("double_ack_rtt.p50").is_some(),
            double,
            "{}",
            v.name
        );
        if double {
            let rtt = v
                .histograms
                .iter()
                .find(|h| h.name == "double_ack_rtt")
                .unwrap();
            assert_eq!(rtt.count, 2000, "every double ack timed");
        }
        // One ratio per mode, on its listed-order run: the mean of its two
        // runs over the mean of explicit's two.
        assert_eq!(
            v.metric("vs_explicit.throughput_ratio").is_some(),
            !v.name.contains("explicit") && !v.name.ends_with("reversed"),
            "{}",
            v.name
        );
    }
    let rate = |name: &str| {
        let (_, v) = summary.variants().find(|(_, v)| v.name == name).unwrap();
        metric(v, "consume_rate")
    };
    let (_, none) = summary
        .variants()
        .find(|(_, v)| v.name == "consume.none")
        .unwrap();
    let expected = (rate("consume.none") + rate("consume.none.reversed"))
        / (rate("consume.explicit") + rate("consume.explicit.reversed"));
    let ratio = metric(none, "vs_explicit.throughput_ratio");
    assert!(
        (ratio - expected).abs() < 1e-9 * expected,
        "{ratio} vs {expected}"
    );
}

/// The consume references read the same stream before and after jsbench's
/// explicit-ack consume, every message once, and jsbench's variant carries
/// its ratios to them (their values are the machine's; none is asserted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_references_read_everything_once_beside_jsbench() {
    let server = common::server();
    let summary = run_profile(
        &server,
        "acks",
        "[[scenario]]\nkind = \"ack\"\nmessages = 2000\nacks = [\"explicit\", \"none\"]\n\
         reference = [\"idiomatic\", \"raw\"]\n[scenario.consumer]\nbatch = 100\n",
    )
    .await;
    assert_all_passed(&summary);
    let names: Vec<&str> = summary.variants().map(|(_, v)| v.name.as_str()).collect();
    // In the order they ran: the references around their paired run.
    assert_eq!(
        names,
        [
            "consume.explicit.idiomatic-before",
            "consume.explicit.raw-before",
            "consume.explicit",
            "consume.explicit.raw-after",
            "consume.explicit.idiomatic-after",
            "consume.none",
            "consume.none.reversed",
            "consume.explicit.reversed",
        ]
    );
    for (_, v) in summary.variants() {
        assert_eq!(v.ledger.delivered, 2000, "{}", v.name);
        assert!(metric(v, "consume_rate") > 0.0, "{}", v.name);
        if v.name.contains('-') {
            let once = v
                .invariants
                .iter()
                .find(|i| i.name == "every message read once")
                .unwrap_or_else(|| panic!("{} has no read-once invariant", v.name));
            assert!(once.passed, "{}: {}", v.name, once.detail);
            assert_eq!(v.ledger.deliveries, 2000, "{}: nothing read twice", v.name);
        }
    }
    let (_, jsbench) = summary
        .variants()
        .find(|(_, v)| v.name == "consume.explicit")
        .unwrap();
    for ratio in ["vs_raw.consume_ratio", "vs_idiomatic.consume_ratio"] {
        assert!(metric(jsbench, ratio) > 0.0, "{ratio}");
    }
    // Every variant, references included, says what a message cost the
    // client (the server's needs --monitor for a server the test started).
    for (_, v) in summary.variants() {
        for name in ["client_cpu_per_msg", "consumer_cpu_per_msg"] {
            assert!(metric(v, name) > 0.0, "{}: {name}", v.name);
        }
    }
    let (_, none) = summary
        .variants()
        .find(|(_, v)| v.name == "consume.none")
        .unwrap();
    assert!(
        none.metric("vs_raw.consume_ratio").is_none(),
        "paired with explicit acks only"
    );
}

/// A reference that stops one message short fails "every message read
/// once": its rate would otherwise be a rate over less work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_that_misses_a_message_fails_its_invariant() {
    use async_nats::jetstream::{self, consumer};
    use jsbench::consume::reference::{self, ReferenceConfig};
    use jsbench::scenario::ack::reference_invariants;

    let server = common::server();
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client.clone());
    let stream = js
        .create_stream(jetstream::stream::Config {
            name: "REF".into(),
            subjects: vec!["ref".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    for _ in 0..50 {
        js.publish("ref", "x".into()).await.unwrap().await.unwrap();
    }
    for (i, raw) in [true, false].into_iter().enumerate() {
        let durable = format!("D{i}");
        stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some(durable.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
        let config = ReferenceConfig {
            stream: "REF".into(),
            durable,
            js_api_prefix: "$JS.API".into(),
            messages: 50,
            batch: 10,
            idle: std::time::Duration::from_secs(10),
            read_at_most: Some(49),
        };
        let stop = tokio_util::sync::CancellationToken::new();
        let report = if raw {
            reference::raw(client.clone(), config, stop).await
        } else {
            reference::idiomatic(client.clone(), config, stop).await
        }
        .unwrap();
        assert_eq!((report.seen, report.duplicates), (49, 0), "raw: {raw}");
        let invariants = reference_invariants(&report, 50);
        let once = invariants
            .iter()
            .find(|i| i.name == "every message read once")
            .unwrap();
        assert!(!once.passed, "raw: {raw}: {}", once.detail);
        assert_eq!(once.detail, "49 of 50 messages read, 0 read again");
        // What it did read, it acked.
        assert!(invariants.iter().all(|i| i.passed || i.name == once.name));
    }
}
