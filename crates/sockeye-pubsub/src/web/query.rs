//! Reading a request's query string: a parameter's value, percent-decoded.

/// The percent-decoded value of `name` in `uri`'s query string (`+` is a space, as forms send).
pub(crate) fn query_param(uri: &http::Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| decode(&value.replace('+', " ")))
    })
}

/// Percent-decoded (RFC 3986 §2.1), invalid UTF-8 replaced.
pub(crate) fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}
