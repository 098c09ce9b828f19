//! The web face's answers: JSON errors `{"error":{"code","message"}}` and fixed bodies.

use axum::body::Body;
use axum::response::Response;
use http::{StatusCode, header};

use crate::json_protocol::reply::push_string;

/// A body with its content type.
pub(crate) fn text(content_type: &'static str, body: &'static str) -> Response {
    with_type(StatusCode::OK, content_type, Body::from(body))
}

/// A JSON answer.
pub(crate) fn json(status: StatusCode, body: String) -> Response {
    with_type(status, "application/json", Body::from(body))
}

/// `{"error":{"code":CODE,"message":MESSAGE}}`, with `status`.
pub(crate) fn error(status: StatusCode, code: &str, message: &str) -> Response {
    json(status, error_body(code, message, ""))
}

/// The error object, with more fields after it (`extra` starts with a comma, or is empty).
pub(crate) fn error_body(code: &str, message: &str, extra: &str) -> String {
    let mut body = String::from(r#"{"error":{"code":"#);
    push_string(&mut body, code);
    body.push_str(r#","message":"#);
    push_string(&mut body, message);
    body.push('}');
    body.push_str(extra);
    body.push('}');
    body
}

fn with_type(status: StatusCode, content_type: &'static str, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}
