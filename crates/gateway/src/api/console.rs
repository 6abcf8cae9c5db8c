//! The admin console: a page on the admin listener that shows the cluster's nodes,
//! connections by transport, topics with subscribers and message rates, presence for a topic,
//! a live tail of a topic, the key rates from `/metrics`, and a form to publish.
//!
//! Its assets (`console/`) are embedded in the binary and load nothing from elsewhere
//! (`content-security-policy: default-src 'self'`). The page reads the admin API itself
//! (`/metrics`, `/v1/cluster/nodes`, `/v1/topics`, `/v1/presence/{topic}`,
//! `POST /v1/publish`), so it is protected exactly as that API is; the one endpoint it adds is
//! the tail, `GET /v1/tail/{topic}`, an SSE stream of the topic's messages in the JSON form.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use herald_core::{ResumeList, TopicName};

use super::query::ApiPath;
use crate::app::AppState;
use crate::error::ApiError;
use crate::transport::{Delivery, lost_json, open_feed};

/// Tails open at once on one node; past it `/v1/tail` answers 503.
pub(crate) const MAX_TAILS: usize = 32;
/// Comment sent on an idle tail, so that proxies and the browser keep it open.
const TAIL_PING: Duration = Duration::from_secs(15);

static TAILS: AtomicUsize = AtomicUsize::new(0);

const CSP: &str = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'";

/// The console's routes, merged into the admin router.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/console", get(page))
        .route("/console/", get(page))
        .route("/console/console.js", get(script))
        .route("/console/console.css", get(style))
        .route("/v1/tail/{topic}", get(tail))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

async fn page() -> Response {
    asset(
        "text/html; charset=utf-8",
        include_str!("console/index.html"),
    )
}

async fn script() -> Response {
    asset(
        "text/javascript; charset=utf-8",
        include_str!("console/console.js"),
    )
}

async fn style() -> Response {
    asset(
        "text/css; charset=utf-8",
        include_str!("console/console.css"),
    )
}

/// One open tail; gives its slot back when dropped.
struct TailSlot;

impl TailSlot {
    fn take() -> Option<Self> {
        TAILS
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_TAILS).then_some(n + 1)
            })
            .ok()
            .map(|_| Self)
    }
}

impl Drop for TailSlot {
    fn drop(&mut self) {
        TAILS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `GET /v1/tail/{topic}`: the topic's messages from now on, as an SSE stream in the JSON form
/// (`data: {"type":"message","topic":..,"id":..,"event":..,"data":..}`), loss signals as
/// `herald.lost` events. Ends when the node drains. The tail subscribes like a client does,
/// so it counts in the topic's subscribers.
pub(crate) async fn tail(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<Response, ApiError> {
    let topic = TopicName::new(&name)?;
    let slot = TailSlot::take().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_tails",
            format!("at most {MAX_TAILS} tails at once"),
        )
    })?;
    // The admin is trusted; the topics a tail creates are charged to one client, "admin".
    let (feed, charges) = open_feed(
        &state,
        std::slice::from_ref(&topic),
        &ResumeList::new(),
        None,
        false,
        "admin",
    )
    .await?;
    let slot = (slot, charges);
    let shutdown = state.shutdown().clone();
    let app = state.clone();
    let opening = Bytes::from(format!("retry: 2000\n: tail of {topic}\n\n"));
    let stream = futures_util::stream::unfold(
        (feed, shutdown, slot, Some(opening), app),
        |(mut feed, shutdown, slot, mut first, app)| async move {
            if let Some(chunk) = first.take() {
                return Some((
                    Ok::<_, Infallible>(chunk),
                    (feed, shutdown, slot, None, app),
                ));
            }
            let chunk = loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return None,
                    _ = tokio::time::sleep(TAIL_PING) => break Bytes::from_static(b": ping\n\n"),
                    event = feed.next() => match crate::transport::deliver(event, "tail", app.config()) {
                        Delivery::Message(m, _) => break m.sse_json_frame().clone(),
                        Delivery::Lost { topic, reason } => {
                            break Bytes::from(format!(
                                "event: herald.lost\ndata: {}\n\n",
                                lost_json(&topic, reason)
                            ));
                        }
                        // The tail's feed is not linked to direct delivery: no partial frames.
                        Delivery::Nothing | Delivery::Rest(_) => continue,
                        Delivery::Disconnect { .. } => return None,
                    },
                }
            };
            Some((Ok(chunk), (feed, shutdown, slot, None, app)))
        },
    );
    Ok(crate::transport::sse::event_stream(Body::from_stream(
        stream,
    )))
}
