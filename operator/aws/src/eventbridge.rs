//! EventBridge's EC2 events, as they arrive in an SQS queue (the event itself is the message
//! body), read into [`Notice`]s.
//!
//! Read: `aws.ec2` "EC2 Spot Instance Interruption Warning" (`detail.instance-id`; the
//! deadline is the event's time plus two minutes), "EC2 Instance Rebalance Recommendation",
//! "EC2 Instance State-change Notification" (`detail.state`), and `aws.health` "AWS Health
//! Event" of service `EC2` and category `scheduledChange` (each `affectedEntities[].entityValue`
//! that is an instance id; the deadline is `startTime`). Any other well-formed event carries no
//! notice; a body that is not an event is an error.

use aws_sdk_ec2::primitives::{DateTime, DateTimeFormat};
use serde::Deserialize;
use spillway_cloud::notices::{Notice, NoticeKind, SPOT_WARNING_LEAD};
use spillway_core::Time;

#[derive(Deserialize)]
struct Event {
    id: String,
    #[serde(rename = "detail-type")]
    detail_type: String,
    source: String,
    time: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    detail: serde_json::Value,
}

/// The notices of one message body.
pub fn notices(body: &str) -> Result<Vec<Notice>, String> {
    let event: Event = serde_json::from_str(body).map_err(|e| {
        format!(
            "not an EventBridge event: {e} (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    let time = parse_time(&event.time).ok_or_else(|| {
        format!(
            "event {}: time {:?} is not an RFC 3339 time",
            event.id, event.time
        )
    })?;
    let detail = |key: &str| event.detail.get(key).and_then(|v| v.as_str());
    let one = |kind: NoticeKind, deadline: Option<Time>| -> Result<Vec<Notice>, String> {
        let instance = detail("instance-id").ok_or_else(|| {
            format!(
                "event {} ({}): no detail.instance-id",
                event.id, event.detail_type
            )
        })?;
        Ok(vec![Notice {
            id: event.id.clone(),
            kind,
            instance: instance.to_string(),
            time,
            deadline,
        }])
    };
    match (event.source.as_str(), event.detail_type.as_str()) {
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => one(
            NoticeKind::SpotInterruptionWarning,
            Some(time + SPOT_WARNING_LEAD),
        ),
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => {
            one(NoticeKind::RebalanceRecommendation, None)
        }
        ("aws.ec2", "EC2 Instance State-change Notification") => {
            let state = detail("state").ok_or_else(|| {
                format!(
                    "event {} ({}): no detail.state",
                    event.id, event.detail_type
                )
            })?;
            one(NoticeKind::StateChange(state.to_string()), None)
        }
        ("aws.health", "AWS Health Event")
            if detail("service") == Some("EC2")
                && detail("eventTypeCategory") == Some("scheduledChange") =>
        {
            let start = detail("startTime").and_then(parse_time);
            let named = event
                .detail
                .get("affectedEntities")
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|e| e.get("entityValue")?.as_str())
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            let instances = if named.is_empty() {
                event.resources.clone()
            } else {
                named
            };
            Ok(instances
                .into_iter()
                .filter(|i| i.starts_with("i-"))
                .map(|instance| Notice {
                    id: event.id.clone(),
                    kind: NoticeKind::ScheduledChange,
                    instance,
                    time,
                    deadline: start,
                })
                .collect())
        }
        _ => Ok(Vec::new()),
    }
}

/// An RFC 3339 time (EventBridge's `time`), or an HTTP date (AWS Health's `startTime`, such as
/// `Sat, 05 Jun 2021 15:10:09 GMT`).
fn parse_time(s: &str) -> Option<Time> {
    let t = DateTime::from_str(s, DateTimeFormat::DateTime)
        .or_else(|_| DateTime::from_str(s, DateTimeFormat::HttpDate))
        .ok()?;
    Some(Time::from_millis(t.to_millis().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As EventBridge delivers them (AWS's documented examples, ids and times changed).
    const WARNING: &str = r#"{"version":"0","id":"1e5527d7-bb36-4607-3370-4164db56a40e","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"2026-12-06T13:00:00Z","region":"us-east-1","resources":["arn:aws:ec2:us-east-1a:instance/i-1234567890abcdef0"],"detail":{"instance-id":"i-1234567890abcdef0","instance-action":"terminate"}}"#;
    const REBALANCE: &str = r#"{"version":"0","id":"5e6d2c1a-0000-4f3e-9a45-1b2c3d4e5f60","detail-type":"EC2 Instance Rebalance Recommendation","source":"aws.ec2","account":"123456789012","time":"2026-12-06T12:58:30Z","region":"us-east-1","resources":["arn:aws:ec2:us-east-1a:instance/i-1234567890abcdef0"],"detail":{"instance-id":"i-1234567890abcdef0"}}"#;
    const STATE: &str = r#"{"version":"0","id":"7bf73129-1428-4cd3-a780-95db273d1602","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","account":"123456789012","time":"2026-12-06T13:02:01.5Z","region":"us-east-1","resources":["arn:aws:ec2:us-east-1:123456789012:instance/i-1234567890abcdef0"],"detail":{"instance-id":"i-1234567890abcdef0","state":"shutting-down"}}"#;
    const HEALTH: &str = r#"{"version":"0","id":"121345678-1234-1234-1234-123456789012","detail-type":"AWS Health Event","source":"aws.health","account":"123456789012","time":"2026-12-06T10:00:00Z","region":"us-east-1","resources":["i-abcd1111"],"detail":{"eventArn":"arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED_1","service":"EC2","eventTypeCode":"AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED","eventTypeCategory":"scheduledChange","startTime":"Mon, 07 Dec 2026 15:10:09 GMT","eventDescription":[{"language":"en_US","latestDescription":"retirement"}],"affectedEntities":[{"entityValue":"i-abcd1111"},{"entityValue":"i-abcd2222"}]}}"#;

    fn t(s: &str) -> Time {
        parse_time(s).unwrap()
    }

    #[test]
    fn a_spot_warning_is_due_two_minutes_after_its_time() {
        let n = notices(WARNING).unwrap();
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].kind, NoticeKind::SpotInterruptionWarning);
        assert_eq!(n[0].instance, "i-1234567890abcdef0");
        assert_eq!(n[0].id, "1e5527d7-bb36-4607-3370-4164db56a40e");
        assert_eq!(n[0].time, t("2026-12-06T13:00:00Z"));
        assert_eq!(n[0].deadline, Some(t("2026-12-06T13:02:00Z")));
    }

    #[test]
    fn rebalance_and_state_changes_name_their_instance() {
        let r = notices(REBALANCE).unwrap();
        assert_eq!(r[0].kind, NoticeKind::RebalanceRecommendation);
        assert_eq!(r[0].deadline, None);
        let s = notices(STATE).unwrap();
        assert_eq!(s[0].kind, NoticeKind::StateChange("shutting-down".into()));
        assert_eq!(
            s[0].time,
            Time::from_millis(t("2026-12-06T13:02:01Z").as_millis() + 500)
        );
    }

    #[test]
    fn a_scheduled_change_names_every_affected_instance_from_its_start() {
        let n = notices(HEALTH).unwrap();
        let ids: Vec<&str> = n.iter().map(|n| n.instance.as_str()).collect();
        assert_eq!(ids, ["i-abcd1111", "i-abcd2222"]);
        assert!(n.iter().all(|n| n.kind == NoticeKind::ScheduledChange
            && n.deadline == Some(t("2026-12-07T15:10:09Z"))));
    }

    #[test]
    fn other_events_carry_no_notice_and_garbage_is_an_error() {
        let other = HEALTH.replace("scheduledChange", "issue");
        assert_eq!(notices(&other).unwrap(), Vec::new());
        let e = notices("{\"hello\":").unwrap_err();
        assert!(e.starts_with("not an EventBridge event"), "{e}");
        let no_instance = WARNING.replace("instance-id", "instance");
        let e = notices(&no_instance).unwrap_err();
        assert!(e.contains("no detail.instance-id"), "{e}");
        let bad_time = WARNING.replace("2026-12-06T13:00:00Z", "yesterday");
        assert!(
            notices(&bad_time)
                .unwrap_err()
                .contains("not an RFC 3339 time")
        );
    }
}
