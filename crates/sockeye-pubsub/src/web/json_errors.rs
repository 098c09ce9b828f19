//! Every error the web face answers is a JSON error object (`{"error":{"code","message"}}`),
//! those of axum's routing and of the WebSocket upgrade too (a method a path does not take, a
//! bad handshake): a layer over the whole router turns an error answer that is not JSON into
//! one, keeping its status and headers (`Allow` of a 405) and saying what to do instead.
//! (hyper's own answers, before a request reaches the router, such as a 431 for a head too
//! large, are not seen here.)

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::{Method, StatusCode, header};

use super::respond;

/// The most of a plain error body kept as the message.
const MAX_MESSAGE: usize = 1024;

/// Runs the request; an error answer without a JSON body is given one.
pub(crate) async fn ensure_json(request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let said = to_bytes(body, MAX_MESSAGE).await.unwrap_or_default();
    let said = String::from_utf8_lossy(&said);
    let message = match (status, said.trim()) {
        // axum adds `Allow` after this layer has run: the message points at it.
        (StatusCode::METHOD_NOT_ALLOWED, _) => format!(
            "{method} is not allowed on {path}: the Allow header lists the methods it takes (see docs/pubsub-protocol.md)"
        ),
        (_, "") => format!(
            "{} ({method} {path}): see docs/pubsub-protocol.md",
            status.canonical_reason().unwrap_or("error")
        ),
        (_, said) => said.to_owned(),
    };
    let json = respond::error(status, code(status, &method), &message);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CONTENT_ENCODING);
    let (json_parts, json_body) = json.into_parts();
    parts.headers.extend(json_parts.headers);
    Response::from_parts(parts, Body::new(json_body))
}

/// The protocol's error code for `status` (docs/pubsub-protocol.md).
fn code(status: StatusCode, method: &Method) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST if method == Method::CONNECT || method == Method::GET => "bad_handshake",
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "not_allowed",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_TIMEOUT => "timeout",
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UPGRADE_REQUIRED => "upgrade_required",
        StatusCode::TOO_MANY_REQUESTS => "too_many_requests",
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "headers_too_large",
        StatusCode::SERVICE_UNAVAILABLE => "unavailable",
        s if s.is_client_error() => "bad_request",
        _ => "internal",
    }
}
