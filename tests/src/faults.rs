//! A thin fault-injecting HTTP proxy in front of moto: moto cannot fail on purpose, so tests
//! point the AWS SDK at this proxy and tell it to answer chosen EC2 actions with EC2 error XML
//! (for example `InsufficientInstanceCapacity` or `RequestLimitExceeded`) a set number of
//! times. Everything else is forwarded to moto unchanged.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One planned failure.
#[derive(Clone, Debug)]
struct Rule {
    action: String,
    body_contains: Option<String>,
    status: u16,
    code: String,
    remaining: u32,
}

#[derive(Default)]
struct Shared {
    rules: Vec<Rule>,
    /// Every action seen, in order, with whether it was failed.
    calls: Vec<(String, bool)>,
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
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let shared: Arc<Mutex<Shared>> = Arc::default();
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
        self.shared.lock().expect("proxy state").rules.push(Rule {
            action: action.to_string(),
            body_contains: body_contains.map(str::to_string),
            status,
            code: code.to_string(),
            remaining: times,
        });
    }

    /// How many calls of `action` were seen, and how many of them were failed.
    pub fn calls(&self, action: &str) -> (usize, usize) {
        let s = self.shared.lock().expect("proxy state");
        let of: Vec<&(String, bool)> = s.calls.iter().filter(|(a, _)| a == action).collect();
        (of.len(), of.iter().filter(|(_, f)| *f).count())
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
    let injected = {
        let mut s = shared.lock().expect("proxy state");
        let rule = s.rules.iter_mut().find(|r| {
            r.remaining > 0
                && r.action == action
                && r.body_contains.as_deref().is_none_or(|c| form.contains(c))
        });
        let out = rule.map(|r| {
            r.remaining -= 1;
            (r.status, r.code.clone())
        });
        s.calls.push((action.clone(), out.is_some()));
        out
    };
    if let Some((status, code)) = injected {
        let xml = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>injected by the test's fault proxy</Message></Error></Errors><RequestID>fault-injected</RequestID></Response>"
        );
        let reason = if status >= 500 {
            "Internal Server Error"
        } else {
            "Bad Request"
        };
        let response = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{xml}",
            xml.len()
        );
        let _ = client.write_all(response.as_bytes()).await;
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
    let _ = client.write_all(&out).await;
    let _ = client.shutdown().await;
}
