//! The JSON protocol served by a `Session` over loopback: many topics on one socket, answers in
//! request order with the request's id, publications with their positions, access rules,
//! refusals that leave the connection up, and a resume that gets exactly what was missed.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use sockeye::{Message, Server, WebSocket};
use sockeye_pubsub::access::AccessRules;
use sockeye_pubsub::json_protocol::JsonProtocol;
use sockeye_pubsub::{Hub, OnGap, Session, SessionConfig, SubscriberConfig};

const WAIT: Duration = Duration::from_secs(5);

type Client = WebSocket<sockeye::TransportStream>;

/// A node serving the JSON protocol on an in-process hub; a connection's `?user=` fills the
/// `{user}` of its access rules (a stand-in for a token's claims).
async fn node(hub: Hub, rules: AccessRules, subscriber: SubscriberConfig) -> String {
    let server = Server::bind("127.0.0.1:0", sockeye::Config::default())
        .await
        .unwrap();
    let url = format!("ws://{}/", server.local_addr().unwrap());
    tokio::spawn(server.serve_requests(move |ws, request, _peer| {
        let hub = hub.clone();
        let rules = rules.clone();
        async move {
            let user = request
                .uri()
                .query()
                .and_then(|q| q.strip_prefix("user="))
                .map(str::to_owned);
            let access = rules.grant(|name| (name == "user").then(|| user.clone()).flatten());
            let protocol = JsonProtocol::new(access, hub.max_payload());
            let config = SessionConfig::default()
                .on_gap(OnGap::Deliver)
                .subscriber(subscriber);
            Session::new(&hub, protocol, config).run(ws).await;
        }
    }));
    url
}

async fn connect(url: &str) -> Client {
    sockeye::connect(url).await.unwrap().0
}

async fn send(ws: &mut Client, frame: Value) {
    ws.send(Message::text(frame.to_string())).await.unwrap();
}

async fn next(ws: &mut Client) -> Value {
    loop {
        match tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a frame in time")
        {
            Some(Ok(Message::Text(t))) => return serde_json::from_str(t.as_str()).unwrap(),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("not a text frame: {other:?}"),
        }
    }
}

async fn quiet(ws: &mut Client) {
    if let Ok(frame) = tokio::time::timeout(Duration::from_millis(200), ws.next()).await {
        panic!("unexpected: {frame:?}");
    }
}

fn all() -> AccessRules {
    AccessRules::allow_all()
}

#[tokio::test]
async fn many_topics_on_one_socket_with_answers_in_order() {
    let url = node(Hub::in_process(), all(), SubscriberConfig::default()).await;
    let mut alice = connect(&url).await;
    let mut bob = connect(&url).await;
    for (i, topic) in ["user/alice", "global"].iter().enumerate() {
        send(&mut alice, json!({"type":"subscribe","topic":topic,"id":i})).await;
    }
    assert_eq!(
        next(&mut alice).await,
        json!({"type":"subscribed","topic":"user/alice","recovery":"live","recovered":0,"id":0})
    );
    assert_eq!(next(&mut alice).await["id"], 1);
    send(&mut bob, json!({"type":"subscribe","topic":"global","id":"b"})).await;
    assert_eq!(next(&mut bob).await["type"], "subscribed");

    // Publications on two topics, each answered with its position, in request order.
    send(
        &mut bob,
        json!({"type":"publish","topic":"global","data":{"n":1},"id":10}),
    )
    .await;
    send(
        &mut bob,
        json!({"type":"publish","topic":"user/alice","data":"hi","id":11}),
    )
    .await;
    send(
        &mut bob,
        json!({"type":"publish","topic":"global","data":[2],"id":12}),
    )
    .await;
    let acks: Vec<Value> = vec![next(&mut bob).await, next(&mut bob).await, next(&mut bob).await];
    assert_eq!(
        acks.iter().map(|a| a["id"].clone()).collect::<Vec<_>>(),
        [10, 11, 12]
    );
    assert!(
        acks.iter()
            .all(|a| a["type"] == "published" && a["offset"].is_u64()),
        "{acks:?}"
    );
    assert_eq!(
        acks[2]["offset"].as_u64(),
        Some(acks[0]["offset"].as_u64().unwrap() + 1)
    );

    let got = [
        next(&mut alice).await,
        next(&mut alice).await,
        next(&mut alice).await,
    ];
    assert_eq!(got[0]["data"], json!({"n":1}));
    assert_eq!(
        got[1],
        json!({"type":"message","topic":"user/alice","offset":acks[1]["offset"],"epoch":acks[1]["epoch"],"data":"hi"})
    );
    assert_eq!(got[2]["data"], json!([2]));
    // The publisher does not get its own publications back.
    quiet(&mut bob).await;

    send(
        &mut alice,
        json!({"type":"unsubscribe","topic":"global","id":"u"}),
    )
    .await;
    assert_eq!(
        next(&mut alice).await,
        json!({"type":"unsubscribed","topic":"global","id":"u"})
    );
    send(&mut bob, json!({"type":"publish","topic":"global","data":3})).await;
    assert_eq!(next(&mut bob).await["type"], "published");
    quiet(&mut alice).await;
}

#[tokio::test]
async fn a_resume_gets_exactly_what_was_missed() {
    let hub = Hub::in_process();
    let url = node(hub, all(), SubscriberConfig::default()).await;
    let mut alice = connect(&url).await;
    send(&mut alice, json!({"type":"subscribe","topic":"t"})).await;
    next(&mut alice).await;
    let mut bob = connect(&url).await;
    send(&mut bob, json!({"type":"publish","topic":"t","data":0})).await;
    next(&mut bob).await;
    let seen = next(&mut alice).await;
    drop(alice);
    for i in 1..=3 {
        send(&mut bob, json!({"type":"publish","topic":"t","data":i})).await;
        next(&mut bob).await;
    }
    let mut alice = connect(&url).await;
    let since = json!({"offset":seen["offset"],"epoch":seen["epoch"]});
    send(
        &mut alice,
        json!({"type":"subscribe","topic":"t","since":since,"id":1}),
    )
    .await;
    assert_eq!(
        next(&mut alice).await,
        json!({"type":"subscribed","topic":"t","recovery":"recovered","recovered":3,"id":1})
    );
    for i in 1..=3 {
        assert_eq!(next(&mut alice).await["data"], i);
    }
    quiet(&mut alice).await;
    // A position of an epoch that never was: lost, a gap, then what the topic holds.
    send(&mut alice, json!({"type":"unsubscribe","topic":"t"})).await;
    next(&mut alice).await;
    send(
        &mut alice,
        json!({"type":"subscribe","topic":"t","since":{"offset":2,"epoch":"nope"}}),
    )
    .await;
    assert_eq!(next(&mut alice).await["recovery"], "lost");
    let gap = next(&mut alice).await;
    assert_eq!(gap["type"], "gap", "{gap}");
    let data: Vec<Value> = vec![
        next(&mut alice).await,
        next(&mut alice).await,
        next(&mut alice).await,
        next(&mut alice).await,
    ];
    assert_eq!(
        data.iter().map(|m| m["data"].clone()).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
}

#[tokio::test]
async fn refusals_are_error_frames_and_the_connection_stays_up() {
    let rules = AccessRules::new()
        .subscribe("user/{user}")
        .unwrap()
        .subscribe("global")
        .unwrap()
        .publish("global")
        .unwrap();
    let url = node(Hub::in_process(), rules, SubscriberConfig::default()).await;
    let mut ws = connect(&format!("{url}?user=alice")).await;
    let cases = [
        (
            json!({"type":"subscribe","topic":"user/bob","id":1}),
            "not_allowed",
        ),
        (
            json!({"type":"publish","topic":"user/alice","data":1,"id":2}),
            "not_allowed",
        ),
        (json!({"type":"dance","id":3}), "unknown_type"),
        (json!({"type":"subscribe","id":4}), "bad_request"),
        (json!({"type":"subscribe","topic":"","id":5}), "invalid_topic"),
        (
            json!({"type":"publish","topic":"global","data":"x".repeat(2 << 20),"id":6}),
            "too_large",
        ),
    ];
    for (frame, code) in &cases {
        send(&mut ws, frame.clone()).await;
        let answer = next(&mut ws).await;
        assert_eq!(
            (answer["type"].as_str(), answer["code"].as_str()),
            (Some("error"), Some(*code)),
            "{frame}"
        );
        assert_eq!(answer["id"], frame["id"]);
    }
    ws.send(Message::text("{not json")).await.unwrap();
    assert_eq!(next(&mut ws).await["code"], "bad_json");
    ws.send(Message::binary(vec![1, 2, 3])).await.unwrap();
    assert_eq!(next(&mut ws).await["code"], "bad_json");
    // Still up, and allowed what the rules grant.
    send(&mut ws, json!({"type":"subscribe","topic":"user/alice","id":7})).await;
    assert_eq!(next(&mut ws).await["type"], "subscribed");
}

#[tokio::test]
async fn a_flood_of_subscribe_requests_is_bounded_and_the_node_stays_healthy() {
    let hub = Hub::in_process();
    let limit = SubscriberConfig::default().max_subscriptions(50);
    let url = node(hub.clone(), all(), limit).await;
    let mut flood = connect(&url).await;
    for i in 0..10_000 {
        flood
            .feed(Message::text(
                json!({"type":"subscribe","topic":format!("t{i}"),"id":i}).to_string(),
            ))
            .await
            .unwrap();
    }
    flood.flush().await.unwrap();
    let (mut subscribed, mut refused) = (0, 0);
    for i in 0..10_000 {
        let answer = next(&mut flood).await;
        assert_eq!(answer["id"], i);
        match answer["type"].as_str() {
            Some("subscribed") => subscribed += 1,
            Some("error") if answer["code"] == "too_many_subscriptions" => refused += 1,
            _ => panic!("{answer}"),
        }
    }
    assert_eq!((subscribed, refused), (50, 9_950));
    assert_eq!(hub.topic_count(), 50);
    // Another client is served as ever.
    let mut other = connect(&url).await;
    send(
        &mut other,
        json!({"type":"publish","topic":"t7","data":"still here","id":1}),
    )
    .await;
    assert_eq!(next(&mut other).await["type"], "published");
    assert_eq!(next(&mut flood).await["data"], "still here");
}

#[tokio::test]
async fn a_message_frame_is_built_once_for_every_subscriber() {
    let hub = Hub::in_process();
    let url = node(hub.clone(), all(), SubscriberConfig::default()).await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut ws = connect(&url).await;
        send(&mut ws, json!({"type":"subscribe","topic":"t"})).await;
        next(&mut ws).await;
        clients.push(ws);
    }
    let topic = sockeye_pubsub::Topic::new("t").unwrap();
    let mut watcher = hub.subscriber(SubscriberConfig::default());
    watcher.subscribe(&topic, None).await.unwrap();
    hub.publish(&topic, Message::text(r#"{"k":1}"#)).await.unwrap();
    let frames: Vec<Value> = futures_util::future::join_all(clients.iter_mut().map(next)).await;
    assert!(frames.iter().all(|f| f["data"] == json!({"k":1})));
    // The watcher's handle is the same publication the sessions framed: its frame is there.
    let Some(Ok(sockeye_pubsub::Delivery::Message(p))) = watcher.recv().await else {
        panic!()
    };
    let framed = p.prepared_as::<JsonProtocol>(|_| panic!("framed again"));
    assert!(framed.is_some());
}
