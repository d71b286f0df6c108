//! Every invariant can fail. Each test runs a scenario against a real
//! server while the test sabotages what the invariant guards (purges
//! stored messages, steals deliveries, publishes a stranger, shortens a
//! deadline, stops the server) and asserts the verdict and its evidence.
//! docs/invariants.md lists every invariant with the test that makes it
//! fail here (or, for the few that only a jsbench bug can break, the unit
//! test that feeds it counts that disagree).

mod common;

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use futures::StreamExt;
use jsbench::results::summary::{Summary, VariantReport};
use jsbench::server::EmbeddedServer;
use jsbench::variant::Invariant;

/// What a saboteur works with: its own connection to the run's server.
struct Saboteur {
    client: async_nats::Client,
    js: jetstream::Context,
}

impl Saboteur {
    /// The run's first stream whose name holds `part`, once it exists.
    async fn stream(&self, part: &str) -> stream::Stream {
        let part = part.to_uppercase();
        self.stream_where(move |n| n.contains(&part)).await
    }

    /// The run's first stream whose name ends with `suffix`, once it exists.
    async fn stream_ending(&self, suffix: &str) -> stream::Stream {
        let suffix = suffix.to_uppercase();
        self.stream_where(move |n| n.ends_with(&suffix)).await
    }

    async fn stream_where(&self, pick: impl Fn(&str) -> bool) -> stream::Stream {
        for _ in 0..2000 {
            let names: Vec<String> = self
                .js
                .stream_names()
                .filter_map(|n| async move { n.ok() })
                .collect()
                .await;
            if let Some(name) = names.iter().find(|n| n.starts_with("JSB_") && pick(n)) {
                return self.js.get_stream(name).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the run stream looked for never appeared");
    }

    /// Once the stream holds 300 messages, holds its durable back from
    /// the consumer and purges the stream: messages gone before any client
    /// saw them.
    async fn hold_back_and_purge(&self, part: &str) {
        let mut stream = self.stream(part).await;
        self.messages(&mut stream, 300).await;
        let durable = self.durable(&stream).await;
        self.pause(
            &stream.cached_info().config.name,
            &durable,
            Duration::from_millis(1200),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        stream.purge().await.unwrap();
    }

    /// Waits until `stream` holds at least `n` messages.
    async fn messages(&self, stream: &mut stream::Stream, n: u64) {
        for _ in 0..4000 {
            if stream.info().await.unwrap().state.messages >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the stream never held {n} messages");
    }

    /// The name of the stream's first durable, once it exists.
    async fn durable(&self, stream: &stream::Stream) -> String {
        for _ in 0..2000 {
            let names: Vec<String> = stream
                .consumer_names()
                .filter_map(|n| async move { n.ok() })
                .collect()
                .await;
            if let Some(name) = names.into_iter().next() {
                return name;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("no durable appeared");
    }

    /// Pauses a durable (nats-server 2.11+) through the JetStream API.
    async fn pause(&self, stream: &str, durable: &str, for_: Duration) {
        let until = time::OffsetDateTime::now_utc() + for_;
        let until = until
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
        let reply = self
            .client
            .request(
                format!("$JS.API.CONSUMER.PAUSE.{stream}.{durable}"),
                format!("{{\"pause_until\":\"{until}\"}}").into(),
            )
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&reply.payload);
        assert!(text.contains("\"paused\":true"), "pause refused: {text}");
    }

    /// Takes up to `n` deliveries from the stream's durable with a pull
    /// of a client that is not jsbench's, and never acks them.
    async fn take(&self, stream: &stream::Stream, n: usize) {
        let durable = self.durable(stream).await;
        self.take_from(stream, &durable, n).await;
    }

    /// [`Saboteur::take`] from a durable named.
    async fn take_from(&self, stream: &stream::Stream, durable: &str, n: usize) {
        let consumer: jetstream::consumer::PullConsumer =
            stream.get_consumer(durable).await.unwrap();
        let mut batch = consumer
            .fetch()
            .max_messages(n)
            .expires(Duration::from_secs(2))
            .messages()
            .await
            .unwrap();
        let mut taken = 0;
        while let Some(m) = batch.next().await {
            m.unwrap();
            taken += 1;
        }
        assert!(taken > 0, "the stranger got no delivery");
    }

    /// Sets the AckWait of the stream's durable under the run.
    async fn shorten_ack_wait(&self, stream: &stream::Stream, ack_wait: Duration) {
        let durable = self.durable(stream).await;
        let consumer: jetstream::consumer::PullConsumer =
            stream.get_consumer(&durable).await.unwrap();
        let mut config = consumer.cached_info().config.clone();
        config.ack_wait = ack_wait;
        stream.update_consumer(config).await.unwrap();
    }

    /// Points a durable at another subject under the run.
    async fn refilter(&self, stream: &stream::Stream, durable: &str, subject: String) {
        let consumer: jetstream::consumer::PullConsumer =
            stream.get_consumer(durable).await.unwrap();
        let mut config = consumer.cached_info().config.clone();
        config.filter_subject = subject;
        config.filter_subjects = Vec::new();
        stream.update_consumer(config).await.unwrap();
    }

    /// The source sequence the DLQ copy at `seq` names as its original.
    async fn origin_of(&self, dlq: &stream::Stream, seq: u64) -> u64 {
        let copy = dlq.get_raw_message(seq).await.unwrap();
        copy.headers
            .get("Nats-Dlq-Origin-Seq")
            .unwrap()
            .as_str()
            .parse()
            .unwrap()
    }

    /// Publishes an advisory as the server would: `kind` is its type's last
    /// word (`max_deliver`, `terminated`), `event` its subject's
    /// (`MAX_DELIVERIES`, `MSG_TERMINATED`).
    async fn advise(&self, (kind, event): (&str, &str), stream: &str, durable: &str, seq: u64) {
        let advisory = format!(
            "{{\"type\":\"io.nats.jetstream.advisory.v1.{kind}\",\"id\":\"sabotage\",\
             \"timestamp\":\"2026-12-01T00:00:00Z\",\"stream\":\"{stream}\",\
             \"consumer\":\"{durable}\",\"stream_seq\":{seq},\"deliveries\":2}}"
        );
        self.client
            .publish(
                format!("$JS.EVENT.ADVISORY.CONSUMER.{event}.{stream}.{durable}"),
                advisory.into(),
            )
            .await
            .unwrap();
        self.client.flush().await.unwrap();
    }

    /// The subject messages of `stream` go to (`<base>.*` captures them).
    async fn subject(&self, stream: &mut stream::Stream) -> String {
        let subjects = stream.info().await.unwrap().config.subjects.clone();
        subjects[0].trim_end_matches('*').to_string() + "stranger"
    }

    /// Publishes a foreign message (no stamp) into `stream`, stored.
    async fn intrude(&self, stream: &mut stream::Stream, payload: &'static str) {
        let subject = self.subject(stream).await;
        self.js
            .publish(subject, payload.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

/// The advisories a saboteur forges: type and subject.
const MAX_DELIVERIES: (&str, &str) = ("max_deliver", "MAX_DELIVERIES");
const MSG_TERMINATED: (&str, &str) = ("terminated", "MSG_TERMINATED");

/// Runs `body` against `server` with `saboteur` at work meanwhile.
async fn sabotaged<F, Fut>(server: &EmbeddedServer, name: &str, body: &str, saboteur: F) -> Summary
where
    F: FnOnce(Saboteur) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let dir = tempfile::tempdir().unwrap();
    // The scenario named after the test, so its streams are found by name.
    let body = body.replacen(
        "[[scenario]]\n",
        &format!("[[scenario]]\nname = \"{name}\"\n"),
        1,
    );
    let profile = common::profile(dir.path(), name, &body);
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client.clone());
    let work = tokio::spawn(async move { saboteur(Saboteur { client, js }).await });
    let outcome = jsbench::run::run(
        common::options(server.url(), &profile, dir.path()),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap_or_else(|e| panic!("run failed: {e:#}"));
    tokio::time::timeout(Duration::from_secs(30), work)
        .await
        .expect("the saboteur finished")
        .expect("the saboteur did not panic");
    common::summary(&outcome.results[0])
}

/// The named invariant of the first variant that checks it: it must have
/// failed, and its evidence must say `says`.
fn failed<'a>(summary: &'a Summary, name: &str, says: &str) -> &'a Invariant {
    let all: Vec<(&VariantReport, &Invariant)> = summary
        .variants()
        .flat_map(|(_, v)| v.invariants.iter().map(move |i| (v, i)))
        .collect();
    let (v, i) = all
        .iter()
        .find(|(_, i)| i.name == name && !i.passed)
        .unwrap_or_else(|| {
            panic!(
                "{name} did not fail; invariants: {:#?}",
                all.iter().map(|(_, i)| i).collect::<Vec<_>>()
            )
        });
    assert!(!v.passed, "the variant fails with it");
    assert!(i.applicable);
    assert!(
        i.detail.contains(says),
        "{name}: evidence {:?} should say {says:?}",
        i.detail
    );
    i
}

fn held(summary: &Summary, name: &str) {
    let i = summary
        .variants()
        .flat_map(|(_, v)| &v.invariants)
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("no {name}"));
    assert!(i.passed, "{name} should hold: {i:?}");
}

/// 1,000 msg/s for 3 s, a 1 s drain: long enough to sabotage, short
/// enough to wait for.
fn latency(extra: &str) -> String {
    common::latency_body(
        "[1000]",
        "3s",
        "0s",
        &format!("drain_timeout = \"2s\"\n{extra}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_purged_before_delivery_are_the_servers_loss() {
    let server = common::server();
    let summary = sabotaged(&server, "purge", &latency(""), |s| async move {
        s.hold_back_and_purge("purge").await;
    })
    .await;
    failed(&summary, "lost = 0", "never delivered");
    failed(&summary, "stream holds every persisted message", "expected");
    held(&summary, "no message dropped by the client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_purged_from_a_stream_below_its_limits_is_no_eviction() {
    let server = common::server();
    // max_msgs far above the 3,000 the run publishes: the limit is never
    // reached, so a missing head cannot be its doing.
    let body = latency("[scenario.stream]\nmax_msgs = 1000000\n");
    let summary = sabotaged(&server, "evict", &body, |s| async move {
        s.hold_back_and_purge("evict").await;
    })
    .await;
    failed(
        &summary,
        "evictions explained by the stream's limits",
        "below every limit: max_msgs 1000000",
    );
    // Not excused as evictions: the purged messages nobody saw are lost.
    failed(&summary, "lost = 0", "never delivered");
    let (_, v) = summary.variants().next().unwrap();
    assert_eq!(v.ledger.evicted, 0, "{:?}", v.ledger);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_a_stranger_took_are_the_clients_loss_and_stay_pending() {
    let server = common::server();
    // jsbench's client pulls ten at a time, so a stranger's pull request
    // gets its turn.
    let body = latency("[scenario.consumer]\nbatch = 10\n");
    let summary = sabotaged(&server, "steal", &body, |s| async move {
        let mut stream = s.stream("steal").await;
        s.messages(&mut stream, 200).await;
        s.take(&stream, 20).await;
    })
    .await;
    let i = failed(
        &summary,
        "no message dropped by the client",
        "delivered by the server",
    );
    assert!(i.client_side);
    failed(
        &summary,
        "server reports nothing pending",
        "num_ack_pending",
    );
    held(&summary, "lost = 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_in_the_stream_fails_the_stamp_and_the_count() {
    let server = common::server();
    let summary = sabotaged(&server, "stranger", &latency(""), |s| async move {
        let mut stream = s.stream("stranger").await;
        s.messages(&mut stream, 100).await;
        s.intrude(&mut stream, "no stamp").await;
    })
    .await;
    failed(&summary, "every payload carries its stamp", "(expected 0)");
    failed(&summary, "stream holds every persisted message", "expected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_published_ahead_makes_the_server_flag_a_fresh_message() {
    let server = common::server();
    let summary = sabotaged(
        &server,
        "ahead",
        &latency("msg_id = \"unique\"\n"),
        |s| async move {
            let mut stream = s.stream("ahead").await;
            s.messages(&mut stream, 10).await;
            let first = stream.get_raw_message(1).await.unwrap();
            let id = first.headers.get("Nats-Msg-Id").unwrap().to_string();
            // `<prefix><n>`: the id of a message jsbench has yet to send.
            let digits = id.len() - id.chars().rev().take_while(|c| c.is_ascii_digit()).count();
            let future = format!("{}{}", &id[..digits], 2500);
            let subject = s.subject(&mut stream).await;
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", future.as_str());
            s.js.publish_with_headers(subject, headers, "ahead".into())
                .await
                .unwrap()
                .await
                .unwrap();
        },
    )
    .await;
    failed(&summary, "no duplicates flagged", "(expected 0)");
    failed(&summary, "every publish persisted", "persisted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_stalled_past_its_pub_ack_timeout_fails_its_variant() {
    let server = common::server();
    let pid = server.pid() as libc::pid_t;
    let summary = sabotaged(
        &server,
        "stalled",
        &latency("pub_ack_timeout = \"300ms\"\npub_ack_window = 64\n"),
        move |s| async move {
            let mut stream = s.stream("stalled").await;
            s.messages(&mut stream, 300).await;
            // SAFETY: signals to the server process this test started.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            tokio::time::sleep(Duration::from_millis(1000)).await;
            unsafe { libc::kill(pid, libc::SIGCONT) };
        },
    )
    .await;
    failed(
        &summary,
        "every publisher finished its schedule",
        "no PubAck arrived",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_shortened_under_the_consumer_shows_as_redelivery() {
    let server = common::server();
    let summary = sabotaged(&server, "shortened", &latency(""), |s| async move {
        let mut stream = s.stream("shortened").await;
        s.messages(&mut stream, 100).await;
        s.shorten_ack_wait(&stream, Duration::from_micros(200))
            .await;
    })
    .await;
    failed(&summary, "no unexpected redelivery", "(expected 0)");
}

fn publish(extra: &str) -> String {
    format!("[[scenario]]\nkind = \"publish\"\nduration = \"2s\"\nrates = [1000]\n{extra}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_the_server_refuses_fail_every_publish_answered() {
    let server = common::server();
    let summary = sabotaged(&server, "refused", &publish(""), |s| async move {
        let mut stream = s.stream("refused").await;
        s.messages(&mut stream, 100).await;
        let mut config = stream.cached_info().config.clone();
        config.max_messages = 200;
        config.discard = stream::DiscardPolicy::New;
        s.js.update_stream(config).await.unwrap();
    })
    .await;
    failed(&summary, "every publish answered", "PubAck errors");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_message_deleted_fails_the_read_back() {
    let server = common::server();
    let summary = sabotaged(&server, "deleted", &publish(""), |s| async move {
        let mut stream = s.stream("deleted").await;
        s.messages(&mut stream, 50).await;
        assert!(stream.delete_message(10).await.unwrap());
    })
    .await;
    failed(
        &summary,
        "nothing lost (read back)",
        "1 confirmed copies missing",
    );
    failed(&summary, "stream count = unique persisted", "expected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_in_a_published_stream_fails_the_read_back() {
    let server = common::server();
    let summary = sabotaged(&server, "unconfirmed", &publish(""), |s| async move {
        let mut stream = s.stream("unconfirmed").await;
        s.messages(&mut stream, 50).await;
        s.intrude(&mut stream, "stranger").await;
    })
    .await;
    failed(
        &summary,
        "nothing stored unconfirmed (read back)",
        "without a stamp",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_window_shrunk_mid_run_stores_retries_inside_it() {
    let server = common::server();
    // 50 msg/s: a retry picks one of the last 64 sends, up to 1.3 s old,
    // well past the 100 ms the window is shrunk to.
    let body = "[[scenario]]\nkind = \"publish\"\nduration = \"4s\"\nrates = [50]\n\
                msg_id = \"unique\"\nduplicates = 0.2\nduplicate_window = \"10s\"\n";
    let summary = sabotaged(&server, "shrunk", body, |s| async move {
        let mut stream = s.stream("shrunk").await;
        s.messages(&mut stream, 20).await;
        let mut config = stream.cached_info().config.clone();
        config.duplicate_window = Duration::from_millis(100);
        s.js.update_stream(config).await.unwrap();
    })
    .await;
    failed(&summary, "duplicates flagged = injected", "expected");
    failed(
        &summary,
        "no retry inside the window stored",
        "(expected 0)",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_window_grown_mid_run_flags_retries_after_it() {
    let server = common::server();
    let body =
        publish("msg_id = \"unique\"\nlate_duplicates = 0.05\nduplicate_window = \"300ms\"\n");
    let summary = sabotaged(&server, "grown", &body, |s| async move {
        let mut stream = s.stream("grown").await;
        s.messages(&mut stream, 50).await;
        let mut config = stream.cached_info().config.clone();
        config.duplicate_window = Duration::from_secs(60);
        s.js.update_stream(config).await.unwrap();
    })
    .await;
    failed(
        &summary,
        "retries after the window stored",
        "flagged duplicate",
    );
}

fn redelivery(extra: &str, consumer: &str, behaviour: &str) -> String {
    format!(
        "[[scenario]]\nkind = \"redelivery\"\nduration = \"2s\"\nrate = 200\nbaseline = false\n{extra}\
         [scenario.consumer]\n{consumer}[scenario.behaviour]\nhandlers = 8\n{behaviour}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_the_server_shortened_makes_redeliveries_early_and_unplanned() {
    let server = common::server();
    // Ignored messages expire after 1 s as configured, until the server is
    // told 100 ms.
    let body = redelivery("", "ack_wait = \"1s\"\nmax_deliver = 3\n", "ignore = 0.2\n");
    let summary = sabotaged(&server, "early", &body, |s| async move {
        let mut stream = s.stream("early").await;
        s.messages(&mut stream, 50).await;
        s.shorten_ack_wait(&stream, Duration::from_millis(100))
            .await;
    })
    .await;
    failed(&summary, "no redelivery earlier than configured", "early");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiries_sooner_than_the_deadlines_are_unexplained() {
    let server = common::server();
    // A greedy client: slow handlers, a short AckWait, so deliveries wait
    // in the client past their deadline and expire (the pathology measured).
    let body = "[[scenario]]\nkind = \"backpressure\"\nduration = \"2s\"\nrate = 200\n\
                max_ack_pending = [64]\nexpiry_ack_waits = []\n\
                [scenario.consumer]\nack_wait = \"2s\"\n\
                [scenario.behaviour]\nhandlers = 1\nprocessing = \"8ms\"\n";
    let summary = sabotaged(&server, "unexplained", body, |s| async move {
        let mut stream = s.stream("unexplained").await;
        s.messages(&mut stream, 50).await;
        // The server now redelivers after 20 ms; the plan says 2 s.
        s.shorten_ack_wait(&stream, Duration::from_millis(20)).await;
    })
    .await;
    failed(&summary, "redeliveries explained", "unexplained");
}

fn dlq(extra: &str) -> String {
    format!(
        "[[scenario]]\nkind = \"dlq\"\nduration = \"1s\"\nrate = 200\nbaseline = false\n\
         retention = \"limits\"\ncapture = \"stream\"\n{extra}\
         [scenario.consumer]\nack_wait = \"100ms\"\nmax_deliver = 2\n\
         [scenario.behaviour]\nhandlers = 8\npoison = {{ fraction = 0.1 }}\n\
         [scenario.handler]\nack_wait = \"300ms\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_in_the_dlq_and_a_copy_deleted_fail_the_audit() {
    let server = common::server();
    let summary = sabotaged(&server, "audited", &dlq(""), |s| async move {
        let mut dlq = s.stream_ending("-DLQ").await;
        s.messages(&mut dlq, 3).await;
        assert!(dlq.delete_message(1).await.unwrap());
        let subjects = dlq.info().await.unwrap().config.subjects.clone();
        let subject = subjects[0].trim_end_matches('>').to_string() + "stranger";
        s.js.publish(subject, "not a dead letter".into())
            .await
            .unwrap()
            .await
            .unwrap();
    })
    .await;
    failed(
        &summary,
        "every dead letter in the DLQ exactly once",
        "missing",
    );
    failed(
        &summary,
        "no other message in the DLQ",
        "says nothing of its origin",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_original_deleted_from_a_limits_stream_fails_the_retention_check() {
    let server = common::server();
    let summary = sabotaged(&server, "retained", &dlq(""), |s| async move {
        let mut dlq = s.stream_ending("-DLQ").await;
        s.messages(&mut dlq, 2).await;
        // The first copy names its original: delete that from the source.
        let origin = s.origin_of(&dlq, 1).await;
        let source = s.stream_ending("_LIMITS").await;
        assert!(source.delete_message(origin).await.unwrap());
    })
    .await;
    failed(&summary, "limits: originals remain", "still readable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_published_ahead_in_the_publish_scenario_fails_its_dedup_checks() {
    let server = common::server();
    let body = publish("msg_id = \"unique\"\n");
    let summary = sabotaged(&server, "fresh", &body, |s| async move {
        let mut stream = s.stream("fresh").await;
        s.messages(&mut stream, 10).await;
        let first = stream.get_raw_message(1).await.unwrap();
        let id = first.headers.get("Nats-Msg-Id").unwrap().to_string();
        let digits = id.len() - id.chars().rev().take_while(|c| c.is_ascii_digit()).count();
        let subject = s.subject(&mut stream).await;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("{}{}", &id[..digits], 1500).as_str());
        s.js.publish_with_headers(subject, headers, "ahead".into())
            .await
            .unwrap()
            .await
            .unwrap();
    })
    .await;
    failed(&summary, "no fresh id flagged duplicate", "(expected 0)");
    // The stranger's message holds the publisher's slot in the count.
    failed(&summary, "stream count = unique persisted", "expected");
    held(&summary, "duplicates flagged = injected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_loop_whose_publishes_are_refused_fails_its_checks() {
    let server = common::server();
    let body = "[[scenario]]\nkind = \"publish\"\nduration = \"1s\"\nrates = [\"max\"]\n\
                reference = [\"idiomatic\"]\npub_ack_window = 256\n";
    let summary = sabotaged(&server, "refused-ref", body, |s| async move {
        let mut stream = s.stream_ending("IDIOMATIC").await;
        s.messages(&mut stream, 100).await;
        let mut config = stream.cached_info().config.clone();
        config.max_messages = 200;
        config.discard = stream::DiscardPolicy::New;
        s.js.update_stream(config).await.unwrap();
        // Full, and one acknowledged message gone.
        s.messages(&mut stream, 200).await;
        assert!(stream.delete_message(1).await.unwrap());
    })
    .await;
    failed(&summary, "no publish errors", "(expected 0)");
    failed(&summary, "every publish acknowledged", "expected");
    failed(&summary, "stream count = acknowledged", "expected");
}

/// The ack scenario reads a filled stream; ten at a time, so a stranger's
/// pull gets its turn.
fn ack(acks: &str) -> String {
    format!(
        "[[scenario]]\nkind = \"ack\"\nmessages = 20000\nacks = [\"{acks}\"]\nreads = [\"pull\"]\n\
         drain_timeout = \"2s\"\n[scenario.consumer]\nbatch = 10\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_taken_from_the_ack_scenario_are_the_clients_loss() {
    let server = common::server();
    let summary = sabotaged(&server, "taken", &ack("explicit"), |s| async move {
        let stream = s.stream("taken").await;
        s.take(&stream, 20).await;
    })
    .await;
    failed(
        &summary,
        "no message dropped by the client",
        "delivered by the server",
    );
    failed(
        &summary,
        "server reports nothing pending",
        "num_ack_pending",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_shortened_under_the_ack_scenario_shows_as_redelivery() {
    let server = common::server();
    let summary = sabotaged(&server, "hurried", &ack("explicit"), |s| async move {
        let stream = s.stream("hurried").await;
        s.shorten_ack_wait(&stream, Duration::from_micros(200))
            .await;
    })
    .await;
    failed(&summary, "no redelivery", "(expected 0)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_copy_fails_the_content_check() {
    let server = common::server();
    let summary = sabotaged(&server, "forged", &dlq(""), |s| async move {
        let mut dlq = s.stream_ending("-DLQ").await;
        s.messages(&mut dlq, 2).await;
        // The real first copy out, a copy with its origin but another
        // payload in.
        let real = dlq.get_raw_message(1).await.unwrap();
        assert!(dlq.delete_message(1).await.unwrap());
        let mut headers = async_nats::HeaderMap::new();
        for (name, values) in real.headers.iter() {
            if name.to_string() != "Nats-Msg-Id" {
                for v in values {
                    headers.append(name.clone(), v.clone());
                }
            }
        }
        s.js.publish_with_headers(real.subject.clone(), headers, "forged payload".into())
            .await
            .unwrap()
            .await
            .unwrap();
    })
    .await;
    failed(
        &summary,
        "copies hold the original payload and headers",
        "payload",
    );
    held(&summary, "every dead letter in the DLQ exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_advisory_for_a_healthy_message_is_caught_by_the_audit() {
    let server = common::server();
    let summary = sabotaged(&server, "framed", &dlq(""), |s| async move {
        let mut source = s.stream_ending("_LIMITS").await;
        s.messages(&mut source, 50).await;
        let durable = s.durable(&source).await;
        let stream = source.cached_info().config.name.clone();
        // Sequence 1 is healthy in this plan (a tenth is poison, seeded):
        // an advisory says the server gave up on it anyway.
        s.advise(MAX_DELIVERIES, &stream, &durable, healthy_seq())
            .await;
    })
    .await;
    failed(
        &summary,
        "one advisory per dead letter, others skipped",
        "1 for other messages",
    );
    failed(
        &summary,
        "no other message in the DLQ",
        "not to be dead-lettered",
    );
}

/// A sequence the dlq test plan (seed 0, a tenth poison) leaves healthy.
fn healthy_seq() -> u64 {
    use jsbench::scenario::parse;
    let profile = parse("p", &format!("name = \"p\"\n{}", dlq(""))).unwrap();
    let jsbench::scenario::KindPlan::Dlq(plan) = &profile.scenarios[0].kind else {
        panic!("a dlq plan");
    };
    (1..100)
        .find(|&seq| {
            plan.load
                .behaviour
                .fate(seq, plan.load.consumer.max_deliver)
                .outcome
                == jsbench::consume::behaviour::Outcome::Acked
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_whose_durable_is_deleted_leaves_advisories_unanswered() {
    let server = common::server();
    let summary = sabotaged(&server, "silenced", &dlq(""), |s| async move {
        let advisories = s.stream_ending("-ADVISORIES").await;
        let handler = s.durable(&advisories).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        advisories.delete_consumer(&handler).await.unwrap();
    })
    .await;
    failed(&summary, "the handler answered every advisory", "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_original_deleted_from_an_interest_stream_fails_the_retention_check() {
    let server = common::server();
    let body = dlq("").replace("retention = \"limits\"", "retention = \"interest\"");
    let summary = sabotaged(&server, "interested", &body, |s| async move {
        let mut dlq = s.stream_ending("-DLQ").await;
        s.messages(&mut dlq, 2).await;
        let origin = s.origin_of(&dlq, 1).await;
        let source = s.stream_ending("_INTEREST").await;
        assert!(source.delete_message(origin).await.unwrap());
    })
    .await;
    failed(
        &summary,
        "interest: originals remain until every consumer acks",
        "still readable",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_work_queue_whose_handler_is_silenced_keeps_its_poison() {
    let server = common::server();
    let body = dlq("").replace("retention = \"limits\"", "retention = \"workqueue\"");
    let summary = sabotaged(&server, "unhandled", &body, |s| async move {
        let advisories = s.stream_ending("-ADVISORIES").await;
        let handler = s.durable(&advisories).await;
        advisories.delete_consumer(&handler).await.unwrap();
    })
    .await;
    failed(
        &summary,
        "workqueue: originals deleted once copied",
        "still readable",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_deleted_around_a_handler_restart_fail_its_exactly_once() {
    let server = common::server();
    let body = dlq("").replace(
        "[scenario.handler]\n",
        "[scenario.handler]\nrestart_after = 3\n",
    );
    let summary = sabotaged(&server, "restarted", &body, |s| async move {
        // The killed handler made three copies; whichever way the new one
        // answers the advisory again, its copy is a duplicate the server
        // drops, so none survives.
        let mut dlq = s.stream_ending("-DLQ").await;
        s.messages(&mut dlq, 3).await;
        for seq in 1..=3 {
            assert!(dlq.delete_message(seq).await.unwrap());
        }
    })
    .await;
    failed(
        &summary,
        "a restarted handler still dead-letters exactly once",
        "not exactly once",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_deleted_before_the_recording_is_read_fails_it() {
    let server = common::server();
    let body = "[[scenario]]\nkind = \"replay\"\nduration = \"1s\"\nrate = 300\n\
                instant = [\"all\"]\noriginal = []\n";
    let summary = sabotaged(&server, "recorded", body, |s| async move {
        let mut stream = s.stream("recorded").await;
        s.messages(&mut stream, 50).await;
        assert!(stream.delete_message(5).await.unwrap());
    })
    .await;
    failed(
        &summary,
        "the recording holds every persisted message",
        "with gaps",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_a_stranger_holds_leave_backpressure_work_unfinished() {
    let server = common::server();
    // A deadline longer than the drain: what the stranger holds is not
    // redelivered to jsbench in time.
    let body = "[[scenario]]\nkind = \"backpressure\"\nduration = \"1s\"\nrate = 200\n\
                max_ack_pending = [64]\nexpiry_ack_waits = []\ndrain_timeout = \"1s\"\n\
                [scenario.consumer]\nack_wait = \"30s\"\nbatch = 10\n\
                [scenario.behaviour]\nhandlers = 4\nprocessing = \"1ms\"\n";
    let summary = sabotaged(&server, "held", body, |s| async move {
        let mut stream = s.stream("held").await;
        s.messages(&mut stream, 50).await;
        s.take(&stream, 20).await;
    })
    .await;
    failed(&summary, "every message completed", "unfinished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_purged_under_the_ack_scenario_is_the_servers_loss() {
    let server = common::server();
    let summary = sabotaged(&server, "emptied", &ack("explicit"), |s| async move {
        let mut stream = s.stream("emptied").await;
        s.messages(&mut stream, 20_000).await;
        stream.purge().await.unwrap();
    })
    .await;
    failed(&summary, "lost = 0", "never delivered");
    held(&summary, "no message dropped by the client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisories_for_messages_that_never_ended_so_fail_the_advisory_counts() {
    let server = common::server();
    let body = redelivery("", "", "");
    let summary = sabotaged(&server, "advised", &body, |s| async move {
        let stream = s.stream("advised").await;
        let durable = s.durable(&stream).await;
        let name = stream.cached_info().config.name.clone();
        // A sequence the run never reaches, told ended both ways, repeated
        // over the run so the watch cannot miss it.
        for _ in 0..10 {
            for advisory in [MAX_DELIVERIES, MSG_TERMINATED] {
                s.advise(advisory, &name, &durable, 1_000_000).await;
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    })
    .await;
    failed(
        &summary,
        "MAX_DELIVERIES advisories = exhausted",
        "1 for other messages",
    );
    failed(
        &summary,
        "MSG_TERMINATED advisories = termed",
        "1 for other messages",
    );
}

/// 2 streams of 4 subjects at 200 msg/s each for 3 s; 3 durables each:
/// subject 0, subjects 1 and 2, all.
fn fanout() -> String {
    "[[scenario]]\nkind = \"fanout\"\nduration = \"3s\"\nrate = 400\nstreams = 2\n\
     durables = 3\nsubjects = 4\nconnections = 2\ndrain_timeout = \"2s\"\n\
     [scenario.consumer]\nbatch = 10\n"
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_in_a_fanout_stream_fails_its_read_back_and_the_stamps() {
    let server = common::server();
    let summary = sabotaged(&server, "fstranger", &fanout(), |s| async move {
        let mut stream = s.stream_ending("_S2-D3-1").await;
        s.messages(&mut stream, 100).await;
        s.intrude(&mut stream, "no stamp").await;
    })
    .await;
    failed(
        &summary,
        "stream holds every PubAcked message, and no other",
        "1 stored without a PubAck",
    );
    // Only the durable reading every subject sees it.
    failed(
        &summary,
        "every payload carries its stamp",
        "failed for 1 of 6 durables; jsb_fstranger_s2-d3-1-2",
    );
    held(&summary, "lost = 0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_taken_from_one_fanout_durable_are_its_clients_loss() {
    let server = common::server();
    let summary = sabotaged(&server, "fsteal", &fanout(), |s| async move {
        let mut stream = s.stream_ending("_S2-D3-0").await;
        s.messages(&mut stream, 200).await;
        s.take_from(&stream, "jsb_fsteal_s2-d3-0-2", 20).await;
    })
    .await;
    let i = failed(
        &summary,
        "no message dropped by the client",
        "failed for 1 of 6 durables; jsb_fsteal_s2-d3-0-2",
    );
    assert!(i.detail.contains("delivered by the server"), "{}", i.detail);
    failed(
        &summary,
        "server reports nothing pending",
        "jsb_fsteal_s2-d3-0-2: num_pending 0, num_ack_pending",
    );
    held(&summary, "only what its filter selects delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_refiltered_under_the_run_delivers_outside_its_filter_and_misses_its_own() {
    let server = common::server();
    let summary = sabotaged(&server, "frefilter", &fanout(), |s| async move {
        let mut stream = s.stream_ending("_S2-D3-0").await;
        s.messages(&mut stream, 200).await;
        let subject = s.subject(&mut stream).await.replace("stranger", "3");
        s.refilter(&stream, "jsb_frefilter_s2-d3-0-0", subject)
            .await;
    })
    .await;
    failed(
        &summary,
        "only what its filter selects delivered",
        "failed for 1 of 6 durables; jsb_frefilter_s2-d3-0-0",
    );
    // Its own subject's later messages went undelivered: the server says
    // it delivered past them, so they count as the client's.
    failed(
        &summary,
        "no message dropped by the client",
        "jsb_frefilter_s2-d3-0-0",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_replayed_into_the_core_subject_fails_every_message_received_once() {
    let server = common::server();
    let body = latency("core_baseline = true\n");
    let summary = sabotaged(&server, "fcore", &body, |s| async move {
        // The baseline's subject, whatever the run's token: a copy of one
        // of its messages, sent again without a reply subject.
        let mut copies = s.client.subscribe("jsb.*.fcore.core-1000.0").await.unwrap();
        s.client.flush().await.unwrap();
        let original = copies.next().await.expect("a core message");
        s.client
            .publish(original.subject.clone(), original.payload.clone())
            .await
            .unwrap();
        s.client.flush().await.unwrap();
    })
    .await;
    failed(
        &summary,
        "every message received once",
        "3001 received, 3000 answered",
    );
}

/// The handler's other path: the source cannot be read (its direct gets
/// switched off under the run), which is not "gone". The handler naks each
/// advisory with its retry delay and keeps trying, terms none, and the
/// dead letters it could not copy fail the exactly-once check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_source_leaves_advisories_nakd_for_retry_not_termed() {
    let server = common::server();
    let body = dlq("drain_timeout = \"3s\"\n").replace(
        "[scenario.handler]\n",
        "[scenario.handler]\nget = \"direct\"\nretry_delay = \"100ms\"\n",
    );
    let summary = sabotaged(&server, "unreadable", &body, |s| async move {
        let source = s.stream_ending("_LIMITS").await;
        let mut config = source.cached_info().config.clone();
        config.allow_direct = false;
        s.js.update_stream(config).await.unwrap();
    })
    .await;
    let copies = failed(
        &summary,
        "every dead letter in the DLQ exactly once",
        "missing",
    );
    assert!(copies.detail.contains("missing"), "{}", copies.detail);
    let (_, v) = summary.variants().next().unwrap();
    assert!(
        common::metric(v, "handler.retries") > 0.0,
        "nak'ed for retry"
    );
    assert_eq!(
        common::metric(v, "originals.gone"),
        0.0,
        "none termed as gone"
    );
}
