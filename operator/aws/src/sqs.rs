//! [`NoticeQueue`] on SQS through `aws-sdk-sqs` and the standard AWS configuration chain
//! (`AWS_REGION`, credentials, `AWS_ENDPOINT_URL_SQS`): long polls and deletes by receipt.

use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::ProvideErrorMetadata;
use spillway_cloud::notices::{NoticeQueue, QueueMessage};
use spillway_cloud::{BoxFuture, CallPolicy, CloudError};

/// The longest wait SQS allows a receive.
const MAX_WAIT: Duration = Duration::from_secs(20);

/// SQS in one region.
#[derive(Clone, Debug)]
pub struct SqsQueue {
    client: Client,
    policy: CallPolicy,
}

impl SqsQueue {
    /// Queues read through `client`, with the SDK's standard retries set to `policy`.
    pub fn new(client: Client, policy: CallPolicy) -> SqsQueue {
        let retry = aws_config::retry::RetryConfig::standard()
            .with_max_attempts(policy.attempts.max(1))
            .with_initial_backoff(policy.initial_backoff)
            .with_max_backoff(policy.max_backoff);
        let config = client.config().to_builder().retry_config(retry).build();
        SqsQueue {
            client: Client::from_conf(config),
            policy,
        }
    }

    /// Queues of `region` from the standard AWS configuration chain.
    pub async fn from_env(region: &str, policy: CallPolicy) -> SqsQueue {
        let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(region.to_string()))
            .load()
            .await;
        SqsQueue::new(Client::new(&config), policy)
    }
}

fn sdk_error<E: ProvideErrorMetadata + std::fmt::Debug>(e: E) -> CloudError {
    match e.code() {
        Some(code) => CloudError::from_code(code, e.message().unwrap_or_default()),
        None => CloudError::Other(format!("{e:?}")),
    }
}

impl NoticeQueue for SqsQueue {
    fn receive<'a>(
        &'a self,
        url: &'a str,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<QueueMessage>, CloudError>> {
        Box::pin(async move {
            let wait = wait.min(MAX_WAIT);
            let call = self
                .client
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .wait_time_seconds(wait.as_secs() as i32)
                .send();
            let out = match tokio::time::timeout(wait + self.policy.timeout, call).await {
                Ok(r) => r.map_err(sdk_error)?,
                Err(_) => {
                    return Err(CloudError::Other(format!(
                        "ReceiveMessage timed out after {:?}",
                        wait + self.policy.timeout
                    )));
                }
            };
            Ok(out
                .messages()
                .iter()
                .filter_map(|m| {
                    Some(QueueMessage {
                        id: m.message_id()?.to_string(),
                        receipt: m.receipt_handle()?.to_string(),
                        notices: crate::eventbridge::notices(m.body().unwrap_or_default()),
                    })
                })
                .collect())
        })
    }

    fn delete<'a>(
        &'a self,
        url: &'a str,
        receipt: &'a str,
    ) -> BoxFuture<'a, Result<(), CloudError>> {
        Box::pin(async move {
            let call = self
                .client
                .delete_message()
                .queue_url(url)
                .receipt_handle(receipt)
                .send();
            match tokio::time::timeout(self.policy.timeout, call).await {
                Ok(r) => r.map(|_| ()).map_err(sdk_error),
                Err(_) => Err(CloudError::Other(format!(
                    "DeleteMessage timed out after {:?}",
                    self.policy.timeout
                ))),
            }
        })
    }
}
