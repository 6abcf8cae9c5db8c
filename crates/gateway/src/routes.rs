//! The two routers: public (SSE, WebSocket, long-poll, the demo page, publishing where it is
//! served) and admin (publishing, stats, health, readiness, metrics, console).
//!
//! The public router's layers (CORS, the body limit) see what hyper serves. SSE and WebSocket
//! requests over HTTP/1.1 are served on the socket directly (`server/`) and never reach them:
//! see docs/architecture.md for what each such path does instead.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse};
use axum::routing::{any, get, post};

use crate::api;
use crate::app::AppState;
use crate::error::ApiError;
use crate::transport;

/// The public router: SSE, WebSocket, long-poll, the demo page and the client library it
/// uses, and the publish API where it is served (with CORS for pages on other origins).
pub fn public_router(state: AppState) -> Router {
    let mut router = Router::new()
        .route("/", get(demo_page))
        .route("/herald-client.js", get(client_script))
        .route(transport::sse::PATH, get(transport::sse::handler))
        .route(transport::ws::PATH, get(transport::ws::handler))
        .route("/v1/poll", get(transport::poll::handler))
        .route("/v1/topics/{topic}/history", get(api::history::public));
    if state.publishes_publicly() {
        router = router
            .route("/v1/publish", post(api::publish::post_one_public))
            .route("/v1/publish/batch", post(api::publish::post_batch_public));
    } else {
        router = router
            .route("/v1/publish", any(publish_not_served))
            .route("/v1/publish/batch", any(publish_not_served));
    }
    router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            api::cors::layer,
        ))
        .layer(DefaultBodyLimit::max(api::publish::body_limit(
            state.config(),
        )))
        .with_state(state)
}

/// The admin router: publishing, topic stats, health, readiness, metrics and the console,
/// behind the admin credentials when `admin.api_keys` is set (`api::admin_auth`).
pub(crate) fn admin_router(state: AppState) -> Router {
    Router::new()
        .route("/v1/publish", post(api::publish::post_one))
        .route("/v1/publish/batch", post(api::publish::post_batch))
        .route("/v1/topics", get(api::admin::topics))
        .route("/v1/topics/{topic}", get(api::admin::topic))
        .route("/v1/topics/{topic}/history", get(api::history::admin))
        .route("/v1/presence/{topic}", get(api::admin::presence))
        .route("/v1/cluster/nodes", get(api::admin::nodes))
        .route(
            "/v1/users/{user}/connections",
            get(api::admin::user_connections),
        )
        .route(
            "/v1/users/{user}/disconnect",
            post(api::control::disconnect_user),
        )
        .route(
            "/v1/connections/{id}/disconnect",
            post(api::control::disconnect_connection),
        )
        .route(
            "/v1/users/{user}/subscribe",
            post(api::control::subscribe_user),
        )
        .route(
            "/v1/users/{user}/unsubscribe",
            post(api::control::unsubscribe_user),
        )
        .route("/v1/users/{user}/send", post(api::control::send_user))
        .route(
            "/v1/connections/{id}/send",
            post(api::control::send_connection),
        )
        .route("/healthz", get(api::admin::healthz))
        .route("/readyz", get(api::admin::readyz))
        .route("/metrics", get(api::admin::metrics))
        .merge(api::console::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            api::admin_auth::require,
        ))
        .layer(DefaultBodyLimit::max(api::publish::body_limit(
            state.config(),
        )))
        .with_state(state)
}

async fn demo_page() -> impl IntoResponse {
    Html(include_str!("demo.html"))
}

/// heraldpush (clients/js) as one ES module, for the demo page and for pages that load it
/// from the gateway (bundled by `npm run bundle` there, kept current by its tests).
async fn client_script() -> impl IntoResponse {
    (
        [
            (
                axum::http::header::CONTENT_TYPE,
                "text/javascript; charset=utf-8",
            ),
            (axum::http::header::CACHE_CONTROL, "no-cache"),
        ],
        include_str!("herald-client.js"),
    )
}

/// `/v1/publish` on a public listener that does not serve it: a 404 as for any route it
/// lacks, saying where publishing is served and what serves it here.
async fn publish_not_served(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "publish_not_served",
        format!(
            "publishing is not served on the public listener: publish on the admin listener \
             ({}, `admin_listen`), or serve it here with API keys (--auth-api-keys, \
             `auth.api_keys`), token keys whose `publish` claim allows the topic \
             (--auth-hs256-secret, `auth.*_public_keys`, `auth.jwks_file`), a publish hook \
             (--hooks-publish-url) or, in development only, --dev (HERALD_DEV=true)",
            state.config().admin_listen
        ),
    )
}

/// A route asked with a method it does not answer: the documented JSON error, not axum's
/// empty 405.
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} does not answer {method}", uri.path()),
    )
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}
