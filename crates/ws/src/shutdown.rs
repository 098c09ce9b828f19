//! Ctrl-C for servers: the library's graceful shutdown closes every open connection with 1001
//! ("going away") and waits for those closing handshakes (bounded) before the process exits.

use sockeye::ShutdownHandle;

/// Runs a server future to its end; Ctrl-C starts the server's graceful shutdown, after which
/// the future ends once every connection has closed (or `Config::shutdown_timeout` passed).
pub(crate) async fn serve_until_ctrl_c(
    serving: impl Future<Output = std::io::Result<()>>,
    shutdown: ShutdownHandle,
) -> Result<(), crate::Failure> {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            tracing::info!("interrupted: closing every connection with 1001");
            shutdown.shutdown();
        }
    });
    serving.await.map_err(crate::Failure::from)
}
