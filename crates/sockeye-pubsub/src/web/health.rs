//! `/healthz` and `/readyz`, for a load balancer or an orchestrator: alive while the node
//! serves, and ready while its backplane is connected (a node cut off from the others would
//! take clients it cannot serve publications from them). The in-process backplane is always
//! ready.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use http::StatusCode;

use super::respond;
use super::shared::Shared;

/// `GET /healthz`: 200 while the node serves requests at all.
pub(crate) async fn alive() -> Response {
    respond::json(StatusCode::OK, r#"{"status":"alive"}"#.to_owned())
}

/// `GET /readyz`: 200 while the backplane is connected; 503 with a JSON error while it is
/// not, or once the hub has stopped.
pub(crate) async fn ready(State(shared): State<Arc<Shared>>) -> Response {
    if shared.hub.backplane_connected() {
        respond::json(
            StatusCode::OK,
            r#"{"status":"ready","backplane":"up"}"#.to_owned(),
        )
    } else {
        respond::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the pub/sub backplane is not connected: this node cannot reach the others (see its log); it reconnects by itself",
        )
    }
}
