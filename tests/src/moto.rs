//! moto's EC2-compatible server, started once per test process on a free loopback port.
//!
//! The real AWS SDK talks to it through `AWS_ENDPOINT_URL_EC2` (or [`MotoServer::ec2_client`])
//! with dummy static credentials. moto does not honour `ClientToken`, serves placeholder spot
//! prices and injects no faults; tests that need faults put a proxy in front of it. Unknown
//! instance types are refused, as on EC2 (`MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::sync::OnceCell;

use crate::process::{Server, find_binary, free_port, temp_dir};

/// A running moto server.
pub struct MotoServer {
    pub endpoint: String,
    pub port: u16,
    server: std::sync::Mutex<Server>,
}

static SHARED: OnceCell<MotoServer> = OnceCell::const_new();

fn moto_binary() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("SPILLWAY_MOTO_SERVER") {
        return Ok(PathBuf::from(p));
    }
    find_binary("moto_server", &[crate::cache_dir().join("moto-venv/bin")])
        .context("moto_server not found; run scripts/moto.sh (or scripts/test.sh) first")
}

impl MotoServer {
    /// The moto server of this test process, started on first use.
    pub async fn shared() -> &'static MotoServer {
        SHARED
            .get_or_try_init(|| async { MotoServer::start() })
            .await
            .unwrap_or_else(|e| panic!("could not start moto: {e:#}"))
    }

    fn start() -> anyhow::Result<MotoServer> {
        let dir = temp_dir("spillway-moto")?;
        let port = free_port()?;
        let mut server = Server::start(
            &dir,
            "moto",
            &moto_binary()?,
            &[
                "-H".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
            ],
            &[("MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION", "true")],
        )?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if server.exited() {
                bail!("moto exited:\n{}", server.log_tail(4000));
            }
            if http(port, "GET", "/moto-api/").is_ok_and(|(status, _)| status < 500) {
                break;
            }
            if Instant::now() > deadline {
                bail!("moto not ready in 30 s:\n{}", server.log_tail(4000));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(MotoServer {
            endpoint: format!("http://127.0.0.1:{port}"),
            port,
            server: std::sync::Mutex::new(server),
        })
    }

    /// Clears all of moto's state (every test sharing this server sees it: use unique tags
    /// instead where tests run in parallel).
    pub fn reset(&self) -> anyhow::Result<()> {
        let (status, body) = http(self.port, "POST", "/moto-api/reset")?;
        if status != 200 {
            bail!("moto reset answered {status}: {body}");
        }
        Ok(())
    }

    /// Creates an IAM instance profile in moto (RunInstances refuses one that does not
    /// exist), with the boto3 of moto's own virtualenv.
    pub fn create_instance_profile(&self, name: &str) -> anyhow::Result<()> {
        let python = moto_binary()?
            .parent()
            .map(|d| d.join("python"))
            .context("moto_server has no directory")?;
        let script = "import boto3, sys\n\
iam = boto3.client('iam', endpoint_url=sys.argv[1], region_name='us-east-1',\n\
    aws_access_key_id='testing', aws_secret_access_key='testing')\n\
try:\n    iam.create_instance_profile(InstanceProfileName=sys.argv[2])\n\
except iam.exceptions.EntityAlreadyExistsException:\n    pass\n";
        let out = std::process::Command::new(&python)
            .args(["-c", script, &self.endpoint, name])
            .output()
            .with_context(|| format!("running {}", python.display()))?;
        if !out.status.success() {
            bail!(
                "creating instance profile {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// One of moto's stock machine images.
    pub async fn ami(&self) -> String {
        self.ec2_client()
            .await
            .describe_images()
            .send()
            .await
            .unwrap_or_else(|e| panic!("DescribeImages: {e:?}\n{}", self.log_tail()))
            .images()
            .iter()
            .find_map(|i| i.image_id().map(str::to_string))
            .expect("moto ships at least one AMI")
    }

    /// The tail of moto's log.
    pub fn log_tail(&self) -> String {
        self.server
            .lock()
            .map(|s| s.log_tail(4000))
            .unwrap_or_default()
    }

    /// An SDK configuration that talks to this server (or to `endpoint`, such as a
    /// fault-injecting proxy in front of it) with dummy credentials in `us-east-1`.
    pub async fn sdk_config(&self, endpoint: Option<&str>) -> aws_config::SdkConfig {
        let creds = aws_sdk_ec2::config::Credentials::new(
            "testing",
            "testing",
            None,
            None,
            "spillway-tests",
        );
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(creds)
            .endpoint_url(endpoint.unwrap_or(&self.endpoint))
            .load()
            .await
    }

    /// An EC2 client for this server.
    pub async fn ec2_client(&self) -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::new(&self.sdk_config(None).await)
    }

    /// An SQS client for this server.
    pub async fn sqs_client(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.sdk_config(None).await)
    }
}

/// A minimal HTTP/1.1 request on loopback; returns the status code and the body.
fn http(port: u16, method: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("malformed HTTP response")?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// An instance tagged for a test's cluster, as `DescribeInstances` lists it.
#[derive(Clone, Debug)]
pub struct TaggedInstance {
    pub reservation_id: String,
    pub id: String,
    pub instance_type: String,
    pub state: Option<aws_sdk_ec2::types::InstanceStateName>,
    pub zone: Option<String>,
    /// Seconds since the epoch.
    pub launched: Option<f64>,
    /// Why it last changed state (EC2 puts the termination time there).
    pub state_reason: Option<String>,
    pub tags: std::collections::BTreeMap<String, String>,
    /// The machine image it booted.
    pub image_id: String,
}

impl TaggedInstance {
    /// The value of tag `key`, empty when it has none.
    pub fn tag(&self, key: &str) -> &str {
        self.tags.get(key).map_or("", String::as_str)
    }

    /// Pending or running: paid for, or about to be.
    pub fn alive(&self) -> bool {
        use aws_sdk_ec2::types::InstanceStateName as S;
        matches!(self.state, Some(S::Pending | S::Running))
    }

    /// Shutting down or terminated.
    pub fn gone(&self) -> bool {
        use aws_sdk_ec2::types::InstanceStateName as S;
        matches!(self.state, Some(S::Terminated | S::ShuttingDown))
    }
}

/// The instances tagged `spillway.io/cluster=cluster` (terminated ones included: moto keeps
/// them listed for a while, as EC2 does).
pub async fn cluster_instances(
    ec2: &aws_sdk_ec2::Client,
    cluster: &str,
) -> Result<Vec<TaggedInstance>, aws_sdk_ec2::Error> {
    let out = ec2
        .describe_instances()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("tag:spillway.io/cluster")
                .values(cluster)
                .build(),
        )
        .send()
        .await?;
    Ok(out
        .reservations()
        .iter()
        .flat_map(|r| r.instances().iter().map(move |i| (r, i)))
        .map(|(r, i)| TaggedInstance {
            reservation_id: r.reservation_id().unwrap_or_default().to_string(),
            id: i.instance_id().unwrap_or_default().to_string(),
            instance_type: i
                .instance_type()
                .map(|t| t.as_str().to_string())
                .unwrap_or_default(),
            state: i.state().and_then(|s| s.name()).cloned(),
            zone: i
                .placement()
                .and_then(|p| p.availability_zone())
                .map(str::to_string),
            launched: i.launch_time().map(|t| t.as_secs_f64()),
            state_reason: i.state_transition_reason().map(str::to_string),
            image_id: i.image_id().unwrap_or_default().to_string(),
            tags: i
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
                .collect(),
        })
        .collect())
}

/// A machine image of moto's with these tags, made as a platform team makes one: an instance
/// of a stock image, imaged (`CreateImage`) and tagged; the instance is terminated.
pub async fn tagged_image(
    ec2: &aws_sdk_ec2::Client,
    name: &str,
    tags: &[(&str, &str)],
) -> anyhow::Result<String> {
    let stock = ec2.describe_images().send().await?;
    let base = stock
        .images()
        .iter()
        .find_map(|i| i.image_id().map(str::to_string))
        .context("moto ships no image")?;
    let run = ec2
        .run_instances()
        .image_id(&base)
        .instance_type(aws_sdk_ec2::types::InstanceType::T3Micro)
        .min_count(1)
        .max_count(1)
        .send()
        .await?;
    let instance = run
        .instances()
        .first()
        .and_then(|i| i.instance_id())
        .context("no instance")?
        .to_string();
    let image = ec2
        .create_image()
        .instance_id(&instance)
        .name(name)
        .send()
        .await?
        .image_id()
        .context("no image id")?
        .to_string();
    let mut req = ec2.create_tags().resources(&image);
    for (k, v) in tags {
        req = req.tags(aws_sdk_ec2::types::Tag::builder().key(*k).value(*v).build());
    }
    req.send().await?;
    ec2.terminate_instances()
        .instance_ids(&instance)
        .send()
        .await?;
    Ok(image)
}

/// An "EC2 Spot Instance Interruption Warning" for `instance` at `time` (RFC 3339), exactly as
/// EventBridge puts it in an SQS queue.
pub fn spot_warning(instance: &str, time: &str) -> String {
    ec2_event(
        "EC2 Spot Instance Interruption Warning",
        instance,
        time,
        r#","instance-action":"terminate""#,
    )
}

/// An "EC2 Instance Rebalance Recommendation" for `instance` at `time`, as EventBridge sends it.
pub fn rebalance_recommendation(instance: &str, time: &str) -> String {
    ec2_event("EC2 Instance Rebalance Recommendation", instance, time, "")
}

fn ec2_event(detail_type: &str, instance: &str, time: &str, more: &str) -> String {
    format!(
        r#"{{"version":"0","id":"{id}","detail-type":"{detail_type}","source":"aws.ec2","account":"123456789012","time":"{time}","region":"us-east-1","resources":["arn:aws:ec2:us-east-1a:instance/{instance}"],"detail":{{"instance-id":"{instance}"{more}}}}}"#,
        id = crate::unique_name("event"),
    )
}
