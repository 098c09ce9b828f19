//! [`IntoClientRequest`]: what can become a handshake request (a URL, or a request with headers
//! of its own).

use http::{Request, Uri};
use sockeye_proto::HandshakeError;

use crate::error::Error;

/// Something that can become a handshake request: a URL (`&str`, `String`, [`Uri`]) or a full
/// [`http::Request`] with headers of your own (subprotocols, cookies, authorization, origin).
pub trait IntoClientRequest {
    /// The request.
    fn into_client_request(self) -> Result<Request<()>, Error>;
}

impl IntoClientRequest for &str {
    fn into_client_request(self) -> Result<Request<()>, Error> {
        let uri: Uri = self
            .parse()
            .map_err(|e| HandshakeError::InvalidUrl(format!("{self:?}: {e}")))?;
        uri.into_client_request()
    }
}

impl IntoClientRequest for String {
    fn into_client_request(self) -> Result<Request<()>, Error> {
        self.as_str().into_client_request()
    }
}

impl IntoClientRequest for &String {
    fn into_client_request(self) -> Result<Request<()>, Error> {
        self.as_str().into_client_request()
    }
}

impl IntoClientRequest for Uri {
    fn into_client_request(self) -> Result<Request<()>, Error> {
        let mut request = Request::new(());
        *request.uri_mut() = self;
        Ok(request)
    }
}

impl IntoClientRequest for Request<()> {
    fn into_client_request(self) -> Result<Request<()>, Error> {
        Ok(self)
    }
}
