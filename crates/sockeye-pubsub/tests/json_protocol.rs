//! The JSON protocol's frames as a client sees them: every server frame is valid JSON with the
//! documented fields, whatever the topic, epoch, id or payload holds.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};
use sockeye::Message;
use sockeye_pubsub::json_protocol::{ErrorCode, Refusal, Request, RequestId, parse_request, reply};
use sockeye_pubsub::{Delivery, Hub, Position, Recovery, SubscriberConfig, Topic};

fn parsed(frame: &str) -> Value {
    serde_json::from_str(frame).unwrap_or_else(|e| panic!("not JSON ({e}): {frame}"))
}

/// Publishes `message` on `topic` of an in-process hub and returns the `message` frame a
/// subscriber is sent for it.
async fn message_frame(message: Message) -> Value {
    let hub = Hub::in_process();
    let topic = Topic::new("room \"1\"/ü").unwrap();
    let mut subscriber = hub.subscriber(SubscriberConfig::default());
    subscriber.subscribe(&topic, None).await.unwrap();
    hub.publish(&topic, message).await.unwrap();
    let delivery = tokio::time::timeout(Duration::from_secs(5), subscriber.recv())
        .await
        .expect("a delivery")
        .expect("the subscriber is open")
        .unwrap();
    let Delivery::Message(publication) = delivery else {
        panic!("not a message: {delivery:?}")
    };
    parsed(&reply::message(&publication))
}

#[tokio::test]
async fn a_json_payload_is_the_data_itself() {
    let frame = message_frame(Message::text(r#" {"text":"hi","n":[1,2]} "#)).await;
    assert_eq!(frame["type"], "message");
    assert_eq!(frame["topic"], "room \"1\"/ü");
    assert_eq!(frame["data"], json!({"text": "hi", "n": [1, 2]}));
    assert_eq!(frame["offset"], 1);
    assert!(frame["epoch"].as_str().is_some_and(|e| !e.is_empty()));
}

#[tokio::test]
async fn a_text_payload_that_is_not_json_is_a_string() {
    let frame = message_frame(Message::text("hello \"world\"\n")).await;
    assert_eq!(frame["data"], "hello \"world\"\n");
}

#[tokio::test]
async fn a_binary_payload_is_base64() {
    let frame = message_frame(Message::binary(vec![0xff, 0x00, 0x7b])).await;
    assert_eq!(frame["data_base64"], "/wB7");
    assert!(frame.get("data").is_none());
}

#[test]
fn answers_echo_the_id_exactly() {
    let topic = Topic::new("t").unwrap();
    let id = RequestId::from_json("7.50").unwrap();
    let frame = parsed(&reply::subscribed(
        &topic,
        &Recovery::Recovered { count: 3 },
        Some(&id),
    ));
    assert_eq!(
        frame,
        json!({"type":"subscribed","topic":"t","recovery":"recovered","recovered":3,"id":7.50})
    );
    let position = Position {
        epoch: "e\"1".into(),
        offset: 9,
    };
    assert_eq!(
        parsed(&reply::published(&topic, Some(&position), None)),
        json!({"type":"published","topic":"t","offset":9,"epoch":"e\"1"})
    );
    assert_eq!(
        parsed(&reply::gap(&topic, Some(&position))),
        json!({"type":"gap","topic":"t","resume":{"offset":9,"epoch":"e\"1"}})
    );
    assert_eq!(
        parsed(&reply::gap(&topic, None)),
        json!({"type":"gap","topic":"t","resume":null})
    );
    assert_eq!(
        parsed(&reply::unsubscribed(
            &topic,
            RequestId::from_json("\"u\"").as_ref()
        )),
        json!({"type":"unsubscribed","topic":"t","id":"u"})
    );
    assert_eq!(parsed(&reply::dropped(4)), json!({"type":"dropped","count":4}));
}

#[test]
fn a_position_from_a_message_resumes_a_subscribe() {
    // What a client stores from a message frame is what it sends back in "since".
    let topic = Topic::new("t").unwrap();
    let position = Position {
        epoch: "abc:1".into(),
        offset: 41,
    };
    let frame = parsed(&reply::published(&topic, Some(&position), None));
    let request =
        json!({"type":"subscribe","topic":"t","since":{"offset":frame["offset"],"epoch":frame["epoch"]}});
    assert_eq!(
        parse_request(request.to_string().as_bytes()),
        Ok(Request::Subscribe {
            topic,
            since: Some(position),
            id: None
        })
    );
}

proptest! {
    #[test]
    fn every_frame_is_json_whatever_the_strings(
        topic in "[^\\p{Cc}]{1,40}",
        epoch in "\\PC{1,20}",
        offset in any::<u64>(),
        message in "\\PC{0,60}",
    ) {
        let topic = Topic::new(&topic).unwrap();
        let position = Position { epoch: epoch.clone().into(), offset };
        let frame = parsed(&reply::gap(&topic, Some(&position)));
        prop_assert_eq!(frame["topic"].as_str(), Some(topic.as_str()));
        prop_assert_eq!(frame["resume"]["epoch"].as_str(), Some(epoch.as_str()));
        prop_assert_eq!(frame["resume"]["offset"].as_u64(), Some(offset));
        let refusal = Refusal::new(None, ErrorCode::NotAllowed, message.clone());
        let frame = parsed(&reply::error(&refusal));
        prop_assert_eq!(frame["message"].as_str(), Some(message.as_str()));
        prop_assert_eq!(frame["code"].as_str(), Some("not_allowed"));
    }

    #[test]
    fn parsing_never_panics(frame in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_request(&frame);
    }

    #[test]
    fn a_request_survives_its_own_encoding(topic in "[^\\p{Cc}]{1,40}", n in any::<i64>()) {
        let request = json!({"type":"publish","topic":topic,"data":{"n":n},"id":n});
        let Ok(Request::Publish { topic: t, data, id }) = parse_request(request.to_string().as_bytes()) else {
            panic!("refused: {request}")
        };
        prop_assert_eq!(t.as_str(), topic.as_str());
        prop_assert_eq!(parsed(std::str::from_utf8(&data).unwrap()), json!({"n": n}));
        prop_assert_eq!(id.unwrap().as_json().to_owned(), n.to_string());
    }
}
