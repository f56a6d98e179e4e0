//! A thin fault-injecting HTTP proxy in front of moto: moto cannot fail on purpose, so tests
//! point the AWS SDK at this proxy and tell it what to do to chosen EC2 actions:
//! - [`FaultProxy::fail`]: answer the next N calls with EC2 error XML (for example
//!   `InsufficientInstanceCapacity` or `RequestLimitExceeded`);
//! - [`FaultProxy::storm`]: for a while, fail, delay or lose the response of a seeded random
//!   share of the calls ([`Effect`]).
//!
//! It also serves what moto lacks: cluster placement groups, with a record of what each
//! `RunInstances` asked for ([`crate::placement`]).
//!
//! Everything else is forwarded to moto unchanged. moto ignores `ClientToken`, so the proxy
//! also plays EC2's documented idempotency for `RunInstances` (what real EC2 does and moto
//! cannot): a request whose token already launched successfully is answered with that launch's
//! response when its other parameters are the same, and with `IdempotentParameterMismatch`
//! when they differ; a failed request binds no token. Only with this can a test lose a
//! `RunInstances` response (the SDK retries with the same token) and still count duplicates.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What a storm does to a call it hits.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Answer with HTTP `status` and the EC2 error `code`, without forwarding.
    Fail { status: u16, code: String },
    /// Forward after a pause.
    Delay(Duration),
    /// Forward (moto acts on it) and close the connection without a response.
    LoseResponse,
}

/// One planned fault.
#[derive(Clone, Debug)]
struct Rule {
    /// `None`: every action.
    action: Option<String>,
    body_contains: Option<String>,
    effect: Effect,
    remaining: u32,
    /// Out of 100 calls that match.
    percent: u64,
    until: Option<Instant>,
}

impl Rule {
    fn matches(&self, action: &str, form: &str, now: Instant) -> bool {
        self.remaining > 0
            && self.until.is_none_or(|u| now < u)
            && self.action.as_deref().is_none_or(|a| a == action)
            && self
                .body_contains
                .as_deref()
                .is_none_or(|c| form.contains(c))
    }
}

/// What happened to one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Forwarded,
    Failed,
    Delayed,
    Lost,
    Replayed,
}

/// Calls of one action, by what the proxy did to them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub calls: usize,
    pub failed: usize,
    pub delayed: usize,
    /// Forwarded, then the response dropped.
    pub lost: usize,
    /// Answered from an earlier launch with the same `ClientToken`.
    pub replayed: usize,
}

#[derive(Default)]
struct Shared {
    rules: Vec<Rule>,
    /// Every action seen, in order, with what was done to it.
    calls: Vec<(String, Outcome)>,
    /// Per call (as `calls`): when it went on to EC2 (after any delay) and when its answer
    /// reached the client, if they did.
    times: Vec<(Option<SystemTime>, Option<SystemTime>)>,
    /// Per call (as `calls`): its `amz-sdk-invocation-id` (one SDK operation: the same id on
    /// each of its retries) and when it arrived.
    invocations: Vec<(Option<String>, Instant)>,
    /// The `x-amz-retry-after` hint (milliseconds) sent with injected throttling errors.
    retry_after_ms: Option<u64>,
    /// The state of the seeded draws of storms.
    rng: u64,
    /// `ClientToken` -> (the request's other parameters, the successful response).
    tokens: HashMap<String, (String, Vec<u8>)>,
    /// One lock per `ClientToken`: EC2 answers concurrent calls with one token as one launch,
    /// so a call waits while another with its token is on its way to moto.
    launching: HashMap<String, Arc<tokio::sync::Mutex<()>>>,
    /// Placement groups, and every `RunInstances` asked.
    placement: crate::placement::Placement,
}

impl Shared {
    fn draw(&mut self) -> u64 {
        self.rng = self
            .rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.rng >> 33) % 100
    }
}

/// One SDK operation (a logical call) and its requests, its retries included.
#[derive(Clone, Debug)]
pub struct Invocation {
    pub id: String,
    pub action: String,
    pub requests: Vec<Instant>,
}

/// The proxy; stops when dropped.
pub struct FaultProxy {
    pub endpoint: String,
    shared: Arc<Mutex<Shared>>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (`http://127.0.0.1:PORT`).
    pub async fn start(upstream: &str) -> anyhow::Result<FaultProxy> {
        FaultProxy::start_seeded(upstream, 1).await
    }

    /// Starts a proxy whose storms draw from `seed`.
    pub async fn start_seeded(upstream: &str, seed: u64) -> anyhow::Result<FaultProxy> {
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Mutex::new(Shared {
            rng: seed,
            ..Shared::default()
        }));
        let s = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, upstream.clone(), s.clone()));
            }
        });
        Ok(FaultProxy {
            endpoint,
            shared,
            task,
        })
    }

    /// Answers the next `times` calls of `action` (whose form body contains `body_contains`,
    /// if given) with HTTP `status` and the EC2 error `code`.
    pub fn fail(
        &self,
        action: &str,
        body_contains: Option<&str>,
        status: u16,
        code: &str,
        times: u32,
    ) {
        self.push(Rule {
            action: Some(action.to_string()),
            body_contains: body_contains.map(str::to_string),
            effect: Effect::Fail {
                status,
                code: code.to_string(),
            },
            remaining: times,
            percent: 100,
            until: None,
        });
    }

    /// For `lasting` from now, does `effect` to `percent` % of the calls of `action` (every
    /// action with `None`) whose form body contains `body_contains` (if given), drawn from the
    /// proxy's seed. Storms and failures are tried in the order they were set; delays add up,
    /// and the first failure or lost response that draws a hit wins.
    pub fn storm(
        &self,
        action: Option<&str>,
        body_contains: Option<&str>,
        percent: u64,
        effect: Effect,
        lasting: Duration,
    ) {
        self.push(Rule {
            action: action.map(str::to_string),
            body_contains: body_contains.map(str::to_string),
            effect,
            remaining: u32::MAX,
            percent: percent.min(100),
            until: Some(Instant::now() + lasting),
        });
    }

    /// Sends `hint` as `x-amz-retry-after` with every injected throttling error, as EC2 may.
    pub fn retry_after(&self, hint: Duration) {
        self.shared.lock().expect("proxy state").retry_after_ms = Some(hint.as_millis() as u64);
    }

    /// Every SDK operation seen (by its `amz-sdk-invocation-id`): its action and the arrival
    /// of each of its requests, in order. Requests without the header are left out.
    pub fn invocations(&self) -> Vec<Invocation> {
        let s = self.shared.lock().expect("proxy state");
        let mut out: Vec<Invocation> = Vec::new();
        for ((action, _), (id, at)) in s.calls.iter().zip(&s.invocations) {
            let Some(id) = id else { continue };
            match out.iter_mut().find(|i| &i.id == id) {
                Some(i) => i.requests.push(*at),
                None => out.push(Invocation {
                    id: id.clone(),
                    action: action.clone(),
                    requests: vec![*at],
                }),
            }
        }
        out
    }

    /// Every placement group made through the proxy (deleted ones too, in state `deleted`).
    pub fn placement_groups(&self) -> Vec<crate::placement::Group> {
        let s = self.shared.lock().expect("proxy state");
        s.placement.groups.values().cloned().collect()
    }

    /// Every `RunInstances` request, in order (failed ones marked).
    pub fn runs(&self) -> Vec<crate::placement::RunRequest> {
        self.shared
            .lock()
            .expect("proxy state")
            .placement
            .runs
            .clone()
    }

    fn push(&self, rule: Rule) {
        self.shared.lock().expect("proxy state").rules.push(rule);
    }

    /// How many calls of `action` were seen, and how many of them were failed.
    pub fn calls(&self, action: &str) -> (usize, usize) {
        let c = self.counts(action);
        (c.calls, c.failed)
    }

    /// The calls of `action` (every action with `""`), by what was done to them.
    pub fn counts(&self, action: &str) -> Counts {
        let s = self.shared.lock().expect("proxy state");
        let mut c = Counts::default();
        for (_, o) in s
            .calls
            .iter()
            .filter(|(a, _)| action.is_empty() || a == action)
        {
            c.calls += 1;
            match o {
                Outcome::Failed => c.failed += 1,
                Outcome::Delayed => c.delayed += 1,
                Outcome::Lost => c.lost += 1,
                Outcome::Replayed => c.replayed += 1,
                Outcome::Forwarded => {}
            }
        }
        c
    }
}

impl FaultProxy {
    /// The earliest answer to a call of `action` that went on to EC2 at or after `t`: when
    /// the caller could first know what EC2 knew at `t`, whatever was failed or delayed.
    pub fn first_answer_after(&self, action: &str, t: SystemTime) -> Option<SystemTime> {
        let s = self.shared.lock().expect("proxy state");
        s.calls
            .iter()
            .zip(&s.times)
            .filter(|((a, _), (sent, _))| a == action && sent.is_some_and(|x| x >= t))
            .filter_map(|(_, (_, answered))| *answered)
            .min()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads one HTTP request: (head without the final blank line, body).
async fn read_request(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some((head, body))
}

fn without_connection_header(head: &str) -> String {
    head.lines()
        .filter(|l| {
            !l.split_once(':')
                .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("connection"))
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

/// What the rules do to one call: a pause, then a failure or a lost response, if any.
fn plan(s: &mut Shared, action: &str, form: &str) -> (Duration, Option<Effect>) {
    let now = Instant::now();
    let mut pause = Duration::ZERO;
    let mut end = None;
    for k in 0..s.rules.len() {
        if !s.rules[k].matches(action, form, now) {
            continue;
        }
        let terminal = !matches!(s.rules[k].effect, Effect::Delay(_));
        if terminal && end.is_some() {
            continue;
        }
        let percent = s.rules[k].percent;
        if percent < 100 && s.draw() >= percent {
            continue;
        }
        let r = &mut s.rules[k];
        r.remaining = r.remaining.saturating_sub(1);
        match &r.effect {
            Effect::Delay(d) => pause += *d,
            e => end = Some(e.clone()),
        }
    }
    (pause, end)
}

/// The `ClientToken` of a form, and the form's other fields in order (what must match for a
/// retry to be the same request).
fn token_of(form: &str) -> Option<(String, String)> {
    let mut token = None;
    let mut rest: Vec<&str> = Vec::new();
    for kv in form.split('&') {
        match kv.strip_prefix("ClientToken=") {
            Some(t) if !t.is_empty() => token = Some(t.to_string()),
            _ => rest.push(kv),
        }
    }
    rest.sort_unstable();
    Some((token?, rest.join("&")))
}

fn error_response(status: u16, code: &str, message: &str, retry_after_ms: Option<u64>) -> String {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>fault-injected</RequestID></Response>"
    );
    let reason = if status >= 500 {
        "Internal Server Error"
    } else {
        "Bad Request"
    };
    let hint = match retry_after_ms {
        Some(ms) if code == "RequestLimitExceeded" => format!("x-amz-retry-after: {ms}\r\n"),
        _ => String::new(),
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n{hint}Connection: close\r\n\r\n{xml}",
        xml.len()
    )
}

async fn serve(mut client: TcpStream, upstream: String, shared: Arc<Mutex<Shared>>) {
    let Some((head, body)) = read_request(&mut client).await else {
        return;
    };
    let form = String::from_utf8_lossy(&body).to_string();
    let action = form
        .split('&')
        .find_map(|kv| kv.strip_prefix("Action="))
        .unwrap_or_default()
        .to_string();
    let token = (action == "RunInstances")
        .then(|| token_of(&form))
        .flatten();
    let (pause, end, call, retry_after_ms) = {
        let mut s = shared.lock().expect("proxy state");
        let (pause, end) = plan(&mut s, &action, &form);
        let outcome = match &end {
            Some(Effect::Fail { .. }) => Outcome::Failed,
            Some(_) => Outcome::Lost,
            None if !pause.is_zero() => Outcome::Delayed,
            None => Outcome::Forwarded,
        };
        s.calls.push((action.clone(), outcome));
        s.times.push((None, None));
        let invocation = head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("amz-sdk-invocation-id")
                .then(|| v.trim().to_string())
        });
        s.invocations.push((invocation, Instant::now()));
        (pause, end, s.calls.len() - 1, s.retry_after_ms)
    };
    tokio::time::sleep(pause).await;
    if action == "RunInstances" {
        let failed = matches!(end, Some(Effect::Fail { .. }));
        let refused = (shared.lock().expect("proxy state").placement)
            .run(crate::placement::decode(&form), failed);
        if let Some(answer) = refused {
            answer_locally(&mut client, answer).await;
            return;
        }
    }
    if end.is_none()
        && matches!(
            action.as_str(),
            "CreatePlacementGroup" | "DescribePlacementGroups" | "DeletePlacementGroup"
        )
    {
        let fields = crate::placement::decode(&form);
        let in_use = match fields.get("GroupName") {
            Some(name) if action == "DeletePlacementGroup" => {
                instances_in_group(&upstream, &head, name).await
            }
            _ => false,
        };
        let answer =
            (shared.lock().expect("proxy state").placement).answer(&action, &fields, |_| in_use);
        answer_locally(&mut client, answer).await;
        return;
    }
    let sent = || shared.lock().expect("proxy state").times[call].0 = Some(SystemTime::now());
    let answered = || shared.lock().expect("proxy state").times[call].1 = Some(SystemTime::now());
    if let Some(Effect::Fail { status, code }) = &end {
        let response = error_response(
            *status,
            code,
            "injected by the test's fault proxy",
            retry_after_ms,
        );
        let _ = client.write_all(response.as_bytes()).await;
        let _ = client.shutdown().await;
        return;
    }
    // A launch waits for any other call with its token, then is answered from the launch
    // that token already made, if one succeeded.
    let lock = token.as_ref().map(|(t, _)| {
        shared
            .lock()
            .expect("proxy state")
            .launching
            .entry(t.clone())
            .or_default()
            .clone()
    });
    let _one_at_a_time = match &lock {
        Some(l) => Some(l.lock().await),
        None => None,
    };
    let lose = end == Some(Effect::LoseResponse);
    sent();
    let earlier = token.as_ref().and_then(|(t, _)| {
        let mut s = shared.lock().expect("proxy state");
        let earlier = s.tokens.get(t).cloned();
        if earlier.is_some() && !lose {
            s.calls[call].1 = Outcome::Replayed;
        }
        earlier
    });
    if let (Some((params, response)), Some((_, mine))) = (&earlier, &token) {
        let out = if params == mine {
            response.clone()
        } else {
            error_response(
                400,
                "IdempotentParameterMismatch",
                "the client token was used by a request with other parameters",
                None,
            )
            .into_bytes()
        };
        if !lose && client.write_all(&out).await.is_ok() {
            answered();
        }
        let _ = client.shutdown().await;
        return;
    }
    let Ok(mut up) = TcpStream::connect(&upstream).await else {
        return;
    };
    let request_head = format!(
        "{}\r\nConnection: close\r\n\r\n",
        without_connection_header(&head)
    );
    if up.write_all(request_head.as_bytes()).await.is_err() || up.write_all(&body).await.is_err() {
        return;
    }
    let mut response = Vec::new();
    if up.read_to_end(&mut response).await.is_err() {
        return;
    }
    // Tell the client the connection closes after this response.
    let out = match find(&response, b"\r\n\r\n") {
        Some(i) => {
            let rhead = String::from_utf8_lossy(&response[..i]).to_string();
            let mut v = format!(
                "{}\r\nConnection: close\r\n\r\n",
                without_connection_header(&rhead)
            )
            .into_bytes();
            v.extend_from_slice(&response[i + 4..]);
            v
        }
        None => response,
    };
    if let Some((t, params)) = token
        && out.starts_with(b"HTTP/1.1 200")
    {
        shared
            .lock()
            .expect("proxy state")
            .tokens
            .entry(t)
            .or_insert((params, out.clone()));
    }
    if !lose && client.write_all(&out).await.is_ok() {
        answered();
    }
    let _ = client.shutdown().await;
}

/// Answers a call from the proxy itself.
async fn answer_locally(client: &mut TcpStream, answer: crate::placement::Answer) {
    let response = match answer {
        crate::placement::Answer::Ok(xml) => format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{xml}",
            xml.len()
        ),
        crate::placement::Answer::Error {
            status,
            code,
            message,
        } => error_response(status, &code, &message, None),
    };
    let _ = client.write_all(response.as_bytes()).await;
    let _ = client.shutdown().await;
}

/// Whether moto lists a live instance tagged as being in placement group `name` (asked with
/// the headers of the call at hand: moto reads the region from its credential scope and does
/// not check signatures). An unanswered question counts as in use.
async fn instances_in_group(upstream: &str, head: &str, name: &str) -> bool {
    let body = crate::placement::instances_in_group_form(name);
    let kept: Vec<&str> = head
        .lines()
        .filter(|l| {
            !l.split_once(':').is_some_and(|(k, _)| {
                let k = k.trim();
                k.eq_ignore_ascii_case("connection") || k.eq_ignore_ascii_case("content-length")
            })
        })
        .collect();
    let request = format!(
        "{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        kept.join("\r\n"),
        body.len()
    );
    let Ok(mut up) = TcpStream::connect(upstream).await else {
        return true;
    };
    if up.write_all(request.as_bytes()).await.is_err() {
        return true;
    }
    let mut response = Vec::new();
    if up.read_to_end(&mut response).await.is_err() {
        return true;
    }
    let text = String::from_utf8_lossy(&response);
    !text.starts_with("HTTP/1.1 200") || text.contains("<instanceId>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storms_hit_their_share_and_fail_rules_count_down() {
        let mut s = Shared {
            rng: 7,
            ..Shared::default()
        };
        s.rules.push(Rule {
            action: Some("RunInstances".into()),
            body_contains: Some("InstanceType=g6.xlarge".into()),
            effect: Effect::Fail {
                status: 500,
                code: "InsufficientInstanceCapacity".into(),
            },
            remaining: 2,
            percent: 100,
            until: None,
        });
        s.rules.push(Rule {
            action: None,
            body_contains: None,
            effect: Effect::Fail {
                status: 503,
                code: "RequestLimitExceeded".into(),
            },
            remaining: u32::MAX,
            percent: 30,
            until: Some(Instant::now() + Duration::from_secs(60)),
        });
        s.rules.push(Rule {
            action: Some("DescribeInstances".into()),
            body_contains: None,
            effect: Effect::Delay(Duration::from_secs(10)),
            remaining: u32::MAX,
            percent: 100,
            until: Some(Instant::now() + Duration::from_secs(60)),
        });
        let g6 = "Action=RunInstances&InstanceType=g6.xlarge";
        for _ in 0..2 {
            let (_, end) = plan(&mut s, "RunInstances", g6);
            assert!(matches!(end, Some(Effect::Fail { status: 500, .. })));
        }
        let mut throttled = 0;
        for _ in 0..1000 {
            let (pause, end) = plan(&mut s, "DescribeInstances", "Action=DescribeInstances");
            assert_eq!(pause, Duration::from_secs(10));
            throttled += usize::from(end.is_some());
        }
        assert!((200..400).contains(&throttled), "{throttled} of 1000");
        // An ended storm does nothing.
        s.rules[1].until = Some(Instant::now());
        let (_, end) = plan(&mut s, "RunInstances", g6);
        assert_eq!(end, None);
    }

    #[test]
    fn a_token_is_the_request_without_it() {
        let (t, rest) =
            token_of("Action=RunInstances&ClientToken=spillway-1&MaxCount=1").expect("token");
        assert_eq!(t, "spillway-1");
        assert_eq!(rest, "Action=RunInstances&MaxCount=1");
        assert_eq!(token_of("Action=RunInstances&MaxCount=1"), None);
    }
}
